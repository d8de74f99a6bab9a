// ProgressChannel: protocol lines through a real FIFO arrive as reports; bad lines are
// counted, warned about once per 100, and do not stop the channel.
#include "launcher/hang/progress_channel.hpp"

#include <catch2/catch.hpp>
#include <vector>

#include "tests/launcher/hang/fifo_test_support.hpp"
#include "tests/support/temp_dir.hpp"

using namespace ddp::launcher;
using ddp::progress::Phase;
using ddp::progress::Report;
using ddp::test::run_for;
using ddp::test::run_until;
using ddp::test::TempDir;
using ddp::test::write_fifo;
using namespace std::chrono_literals;

namespace {

struct Fixture {
  Fixture()
      : channel(io, dir.path() / "progress",
                [this](const Report& report) { reports.push_back(report); }) {
    channel.set_warning_sink([this](const std::string& message) { warnings.push_back(message); });
  }

  TempDir dir;
  boost::asio::io_context io;
  std::vector<Report> reports;
  std::vector<std::string> warnings;
  ProgressChannel channel;
};

Report report(int rank, int64_t step) {
  Report r;
  r.rank = rank;
  r.pid = 1000 + rank;
  r.step = step;
  return r;
}

}  // namespace

TEST_CASE("ProgressChannel turns protocol lines from workers into reports", "[progress_channel]") {
  Fixture f;
  Report collective = report(1, 5);
  collective.op = "allreduce";
  collective.seq = 42;
  collective.phase = Phase::kEnter;
  REQUIRE(write_fifo(f.channel.path(), format(report(0, 5))));
  REQUIRE(write_fifo(f.channel.path(), format(collective)));
  // Two lines in one write, and a line split over two writes.
  REQUIRE(write_fifo(f.channel.path(), format(report(0, 6)) + format(report(1, 6)) + "v1 rank=0"));
  REQUIRE(write_fifo(f.channel.path(), " pid=1000 step=7\n"));
  REQUIRE(run_until(
      f.io, [&] { return f.reports.size() >= 5; }, 10s));
  REQUIRE(f.reports.size() == 5);
  CHECK(f.reports[0] == report(0, 5));
  CHECK(f.reports[1] == collective);
  CHECK(f.reports[2] == report(0, 6));
  CHECK(f.reports[3] == report(1, 6));
  CHECK(f.reports[4] == report(0, 7));
  CHECK(f.channel.reports() == 5);
  CHECK(f.channel.bad_lines() == 0);
  CHECK(f.warnings.empty());
}

TEST_CASE("ProgressChannel ignores bad lines with one warning per 100 and keeps serving",
          "[progress_channel]") {
  Fixture f;
  REQUIRE(write_fifo(f.channel.path(), "\n   \n"));  // blank lines are neither good nor bad
  REQUIRE(write_fifo(f.channel.path(), "v1 rank=0 pid=1 step=oops\n"));
  REQUIRE(run_until(
      f.io, [&] { return f.channel.bad_lines() == 1; }, 10s));
  REQUIRE(f.warnings.size() == 1);
  CHECK_THAT(f.warnings[0], Catch::Contains("ignored a bad progress line") &&
                                Catch::Contains("'v1 rank=0 pid=1 step=oops'") &&
                                Catch::Contains("expected step=<int64 >= 0>") &&
                                Catch::Contains(f.channel.path().string()));
  std::string garbage;
  for (int i = 0; i < 149; ++i) garbage += "garbage " + std::to_string(i) + "\n";
  REQUIRE(write_fifo(f.channel.path(), garbage));
  REQUIRE(write_fifo(f.channel.path(), format(report(2, 1))));
  REQUIRE(run_until(
      f.io, [&] { return !f.reports.empty(); }, 10s));
  CHECK(f.channel.bad_lines() == 150);
  CHECK(f.warnings.size() == 2);  // the 1st and the 101st
  CHECK(f.reports.size() == 1);
  CHECK(f.reports[0] == report(2, 1));
}

TEST_CASE("ProgressChannel::close stops the reports", "[progress_channel]") {
  Fixture f;
  REQUIRE(write_fifo(f.channel.path(), format(report(0, 1))));
  REQUIRE(run_until(
      f.io, [&] { return !f.reports.empty(); }, 10s));
  f.channel.close();
  CHECK_FALSE(write_fifo(f.channel.path(), format(report(0, 2))));
  run_for(f.io, 50ms);
  CHECK(f.reports.size() == 1);
}
