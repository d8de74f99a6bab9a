#include "rendezvous/store/store.hpp"

#include "common/error.hpp"

namespace ddp::rendezvous {

std::string join_keys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 5;
  std::string out;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i > 0) out += ", ";
    out += "'" + keys[i] + "'";
  }
  if (keys.size() > kShown) out += ", ... (" + std::to_string(keys.size()) + " keys)";
  return out;
}

std::string describe_timeout(Duration timeout) {
  if (timeout == kNoTimeout) return "no timeout";
  return std::to_string(timeout.count()) + " ms";
}

void Store::end_presence(const std::string& token) {
  throw StoreError("store " + describe() + ": cannot end presence '" + token +
                   "' from elsewhere (its connection ends it)");
}

std::optional<std::string> read_if_present(Store& store, const std::string& key) {
  // Never a stored value: rendezvous values are decimal text, records and ids.
  static const std::string kAbsent("\0ddp-absent\0", 12);
  std::string value = store.compare_set(key, kAbsent, kAbsent);
  if (value == kAbsent) return std::nullopt;
  return value;
}

}  // namespace ddp::rendezvous
