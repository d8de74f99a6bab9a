// parse_int: the one integer parser. Whole text, base 10, range-checked; errors name the
// variable, the value and what was expected.
#include "common/parse_int.hpp"

#include <catch2/catch.hpp>
#include <limits>

#include "common/error.hpp"

using Catch::Contains;
using ddp::parse_int;
using ddp::try_parse_int;

namespace {
constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
}

TEST_CASE("parse_int: whole decimal integers in range", "[parse_int]") {
  CHECK(parse_int("N", "0") == 0);
  CHECK(parse_int("N", "42", 1, 65535) == 42);
  CHECK(parse_int("N", "-7") == -7);
  CHECK(parse_int("N", "007") == 7);
  CHECK(parse_int("N", "65535", 1, 65535) == 65535);
  CHECK(parse_int("N", "9223372036854775807") == std::numeric_limits<int64_t>::max());
  CHECK(parse_int("N", "-9223372036854775808") == std::numeric_limits<int64_t>::min());
}

TEST_CASE("parse_int: bad values name the variable, the value and the expectation", "[parse_int]") {
  struct Row {
    const char* text;
    int64_t min;
    int64_t max;
    const char* says;
  };
  const Row table[] = {
      {"abc", 1, 65535, "SLURM_NNODES='abc': expected an integer in [1, 65535]"},
      {"", 1, 65535, "SLURM_NNODES='': expected an integer in [1, 65535]"},
      {"12abc", 1, 65535, "SLURM_NNODES='12abc': expected an integer in [1, 65535]"},
      {"1.5", 1, 65535, "SLURM_NNODES='1.5': expected an integer in [1, 65535]"},
      {" 1", 1, 65535, "SLURM_NNODES=' 1': expected an integer in [1, 65535]"},
      {"1 ", 1, 65535, "SLURM_NNODES='1 ': expected an integer in [1, 65535]"},
      {"+1", 1, 65535, "SLURM_NNODES='+1': expected an integer in [1, 65535]"},
      {"-", 1, 65535, "SLURM_NNODES='-': expected an integer in [1, 65535]"},
      {"0", 1, 65535, "SLURM_NNODES='0': expected an integer in [1, 65535]"},
      {"65536", 1, 65535, "SLURM_NNODES='65536': expected an integer in [1, 65535]"},
      // A maximum that is only the type's goes unsaid, unless the value broke it.
      {"four", 1, kMaxInt, "SLURM_NNODES='four': expected an integer >= 1"},
      {"-1", 0, kMaxInt, "SLURM_NNODES='-1': expected an integer >= 0"},
      {"2147483648", 1, kMaxInt,
       "SLURM_NNODES='2147483648': expected an integer in [1, 2147483647]"},
      // Overflow of int64 itself.
      {"99999999999999999999", 1, ddp::kIntMax,
       "SLURM_NNODES='99999999999999999999': expected an integer in [1, 9223372036854775807]"},
      {"-99999999999999999999", 1, ddp::kIntMax,
       "SLURM_NNODES='-99999999999999999999': expected an integer >= 1"},
      {"x", ddp::kIntMin, ddp::kIntMax, "SLURM_NNODES='x': expected an integer"},
      {"x", ddp::kIntMin, 10, "SLURM_NNODES='x': expected an integer <= 10"},
  };
  for (const auto& row : table) {
    INFO(row.text);
    CHECK_THROWS_AS(parse_int("SLURM_NNODES", row.text, row.min, row.max), ddp::ConfigError);
    CHECK_THROWS_WITH(parse_int("SLURM_NNODES", row.text, row.min, row.max), row.says);
    CHECK_FALSE(try_parse_int(row.text, row.min, row.max).has_value());
  }
}

TEST_CASE("try_parse_int: nullopt instead of an error", "[parse_int]") {
  CHECK(try_parse_int("12") == 12);
  CHECK(try_parse_int("12", 0, 3) == std::nullopt);
  CHECK(try_parse_int("3", 0, 3) == 3);
  CHECK(try_parse_int("") == std::nullopt);
  CHECK(try_parse_int("0x10") == std::nullopt);
  CHECK(try_parse_int("99999999999999999999") == std::nullopt);
}

TEST_CASE("expected_int_text says the range as the errors do", "[parse_int]") {
  CHECK(ddp::expected_int_text(1, 65535) == "an integer in [1, 65535]");
  CHECK(ddp::expected_int_text(0, kMaxInt) == "an integer >= 0");
  CHECK(ddp::expected_int_text(ddp::kIntMin, ddp::kIntMax) == "an integer");
}
