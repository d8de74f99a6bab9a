#pragma once
// The one integer parser for flags, env variables and config values: base 10, the whole text
// (no sign '+', no spaces, no trailing junk), range-checked. Errors name the variable or
// flag, the value and what was expected: "SLURM_NNODES='abc': expected an integer >= 1".
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace ddp {

inline constexpr int64_t kIntMin = std::numeric_limits<int64_t>::min();
inline constexpr int64_t kIntMax = std::numeric_limits<int64_t>::max();

// text as an integer in [min, max]; nullopt when it is empty, not all digits (after an
// optional '-'), overflows, or lies outside the range.
std::optional<int64_t> try_parse_int(std::string_view text, int64_t min = kIntMin,
                                     int64_t max = kIntMax);

// text as an integer in [min, max], or ConfigError "<name>='<text>': expected " followed by
// expected_int_text(min, max), or by "an integer in [min, max]" when the value is too big.
int64_t parse_int(std::string_view name, std::string_view text, int64_t min = kIntMin,
                  int64_t max = kIntMax);

// What parse_int expects: "an integer in [1, 65535]", "an integer >= 1" (a maximum that is
// int's or int64's own is no real limit and goes unsaid), "an integer".
std::string expected_int_text(int64_t min, int64_t max);

}  // namespace ddp
