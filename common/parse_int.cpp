#include "common/parse_int.hpp"

#include <charconv>

#include "common/error.hpp"

namespace ddp {
namespace {

// A maximum that only says "fits the type": not worth naming unless the value is above it.
bool is_type_limit(int64_t max) {
  return max == kIntMax || max == std::numeric_limits<int>::max();
}

}  // namespace

std::optional<int64_t> try_parse_int(std::string_view text, int64_t min, int64_t max) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < min || value > max) {
    return std::nullopt;
  }
  return value;
}

std::string expected_int_text(int64_t min, int64_t max) {
  if (is_type_limit(max)) {
    return min == kIntMin ? "an integer" : "an integer >= " + std::to_string(min);
  }
  if (min == kIntMin) return "an integer <= " + std::to_string(max);
  return "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
}

int64_t parse_int(std::string_view name, std::string_view text, int64_t min, int64_t max) {
  if (auto value = try_parse_int(text, min, max)) return *value;
  // Name the maximum when it is what the value broke (too big, or beyond int64).
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  const bool too_big = !text.empty() && ptr == end &&
                       (ec == std::errc::result_out_of_range ? text.front() != '-' : value > max);
  const std::string expected =
      too_big ? "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]"
              : expected_int_text(min, max);
  throw ConfigError(std::string(name) + "='" + std::string(text) + "': expected " + expected);
}

}  // namespace ddp
