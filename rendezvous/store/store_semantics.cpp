#include "rendezvous/store/store_semantics.hpp"

#include <charconv>

#include "common/error.hpp"

namespace ddp::rendezvous {

int64_t apply_add(KeyValueMap& data, const std::string& key, int64_t delta) {
  int64_t current = 0;
  auto it = data.find(key);
  if (it != data.end()) {
    const std::string& s = it->second;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), current);
    if (ec != std::errc() || ptr != s.data() + s.size()) {
      throw ProtocolError("add on key '" + key + "': stored value '" + s.substr(0, 64) +
                          "' is not a decimal integer");
    }
  }
  if (__builtin_add_overflow(current, delta, &current)) {
    throw ProtocolError("add on key '" + key + "': " + it->second + " + " + std::to_string(delta) +
                        " overflows int64");
  }
  data[key] = std::to_string(current);
  return current;
}

std::string apply_compare_set(KeyValueMap& data, const std::string& key,
                              const std::string& expected, const std::string& desired) {
  auto it = data.find(key);
  if (it == data.end()) {
    if (expected.empty()) {
      data.emplace(key, desired);
      return desired;
    }
    return expected;
  }
  if (it->second == expected) {
    it->second = desired;
    return desired;
  }
  return it->second;
}

}  // namespace ddp::rendezvous
