// The progress line protocol: format/parse round trips, and errors that name the bad token.
#include "common/progress_protocol.hpp"

#include <catch2/catch.hpp>
#include <cstring>

#include "common/env_names.hpp"

using namespace ddp::progress;

TEST_CASE("progress lines round-trip through format and parse", "[progress_protocol]") {
  Report minimal;
  minimal.rank = 3;
  minimal.pid = 4242;
  minimal.step = 17;
  CHECK(format(minimal) == "v1 rank=3 pid=4242 step=17\n");

  Report full = minimal;
  full.step = 9000000000LL;
  full.op = "allreduce";
  full.seq = 12;
  full.phase = Phase::kEnter;
  CHECK(format(full) == "v1 rank=3 pid=4242 step=9000000000 op=allreduce seq=12 phase=enter\n");

  Report exit_only = minimal;
  exit_only.phase = Phase::kExit;
  for (const Report& report : {minimal, full, exit_only}) {
    std::string error;
    auto parsed = parse(format(report), &error);
    INFO(format(report) << error);
    REQUIRE(parsed);
    CHECK(*parsed == report);
  }
}

TEST_CASE("progress parse accepts extra spaces, CRLF, unknown keys and any key order",
          "[progress_protocol]") {
  std::string error;
  auto report = parse("v1  seq=5 future=thing pid=7\tstep=0 rank=0 op=a=b\r\n", &error);
  INFO(error);
  REQUIRE(report);
  CHECK(report->rank == 0);
  CHECK(report->pid == 7);
  CHECK(report->step == 0);
  CHECK(report->seq == 5);
  CHECK(report->op == "a=b");  // split at the first '='
  CHECK(report->phase == Phase::kNone);
  CHECK(parse("v1 rank=1 pid=2 step=3", nullptr));  // no newline, no error sink
}

TEST_CASE("progress format keeps a line parseable: whitespace in op, long op names",
          "[progress_protocol]") {
  Report report;
  report.rank = 0;
  report.pid = 1;
  report.step = 2;
  report.op = "all reduce\tx\ny";
  auto parsed = parse(format(report), nullptr);
  REQUIRE(parsed);
  CHECK(parsed->op == "all_reduce_x_y");

  report.op = std::string(10000, 'o');
  std::string line = format(report);
  CHECK(line.size() <= kMaxLineBytes);
  parsed = parse(line, nullptr);
  REQUIRE(parsed);
  CHECK(parsed->op == std::string(kMaxOpBytes, 'o'));
}

TEST_CASE("progress parse errors name the bad token and what was expected", "[progress_protocol]") {
  struct Case {
    const char* line;
    const char* error_part;
  };
  const Case cases[] = {
      {"", "empty line"},
      {"   \n", "empty line"},
      {"v2 rank=1 pid=2 step=3", "'v2': expected the version 'v1' first"},
      {"rank=1 pid=2 step=3", "'rank=1': expected the version 'v1' first"},
      {"v1 rank=x pid=2 step=3", "'rank=x': expected rank=<int >= 0>"},
      {"v1 rank=-1 pid=2 step=3", "'rank=-1': expected rank=<int >= 0>"},
      {"v1 rank=1 pid=0 step=3", "'pid=0': expected pid=<int > 0>"},
      {"v1 rank=1 pid=2 step=3.5", "'step=3.5': expected step=<int64 >= 0>"},
      {"v1 rank=1 pid=2 step=99999999999999999999", "expected step=<int64 >= 0>"},
      {"v1 rank=1 pid=2 step=3 seq=", "'seq=': expected seq=<int64 >= 0>"},
      {"v1 rank=1 pid=2 step=3 phase=middle", "'phase=middle': expected phase=enter|exit"},
      {"v1 rank=1 pid=2 step=3 op=", "'op=': expected op=<name>"},
      {"v1 rank=1 pid=2 step=3 loose", "'loose': expected key=value"},
      {"v1 rank=1 pid=2 step=3 =5", "'=5': expected key=value"},
      {"v1 pid=2 step=3", "has no rank=<int>"},
      {"v1 rank=1 step=3", "has no pid=<int>"},
      {"v1 rank=1 pid=2", "has no step=<int64>"},
  };
  for (const auto& c : cases) {
    std::string error;
    INFO(c.line);
    CHECK_FALSE(parse(c.line, &error));
    CHECK_THAT(error, Catch::Contains(c.error_part));
  }
  std::string error;
  std::string huge = "v1 rank=1 pid=2 step=3 pad=" + std::string(kMaxLineBytes, 'p');
  CHECK_FALSE(parse(huge, &error));
  CHECK_THAT(error, Catch::Contains("expected at most 4096"));
  CHECK_FALSE(parse("v1 rank=", nullptr));  // no error sink: no crash
}

TEST_CASE("the progress FIFO's variable is declared with the env contract", "[progress_protocol]") {
  CHECK(std::strcmp(kEnvProgressFile, "DDPLAUNCH_PROGRESS_FILE") == 0);
  CHECK(std::strcmp(ddp::env::kProgressFile, kEnvProgressFile) == 0);
}
