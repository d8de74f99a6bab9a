// The real ddplaunch with a console nobody reads: the agent still reacts to a failing worker
// at once, and the log files keep what the console had to drop.
#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/support/files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/wait_until.hpp"

using namespace ddp::test;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

const std::string kDdplaunch = build_path("ddplaunch");

// The first file under dir (any depth) whose path ends with tail; empty when none does.
std::filesystem::path find_file(const std::filesystem::path& dir, const std::string& tail) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (entry.path().string().ends_with(tail)) return entry.path();
  }
  return {};
}

}  // namespace

TEST_CASE("a console nobody reads does not stop the agent from reacting", "[process]") {
  TempDir dir;
  constexpr int kFloodLines = 80000;  // 8 MB: far past the stdout pipe and the console queue
  auto logs = dir.path() / "logs";
  auto events = dir.path() / "events.jsonl";
  auto rc_file = dir.path() / "rc";
  // stdout is a pipe into `sleep`, which never reads it.
  // --slow_console=drop: this is the test of dropping (the default holds the workers back).
  std::string command = "{ " + kDdplaunch +
                        " --slow_console=drop --nproc_per_node 2 "
                        "--standalone --log_dir " +
                        logs.string() + " -t 3 --events_file " + events.string() + " --no_python " +
                        source_path("tests/launcher/workers/flood_then_fail.sh") + "; echo $? > " +
                        rc_file.string() + "; } | sleep 120";
  ChildOptions options;
  options.argv = {"/bin/sh", "-c", command};
  options.env = {{"OUT_DIR", dir.path().string()}, {"FLOOD_LINES", std::to_string(kFloodLines)}};
  options.own_process_group = true;  // the destructor takes `sleep` too
  ChildProcess pipeline(options);

  // Before the fix the agent sat in write(2) until `sleep` ended.
  REQUIRE(wait_until([&] { return read_file(rc_file).ends_with("\n"); }, 60s));
  INFO(pipeline.err());
  CHECK(read_file(rc_file) == "5\n");

  // The exit of rank 1 was seen when it happened, and the job finished after it.
  double exited_at = std::stod(read_file(dir.path() / "exit_time_1"));
  std::vector<std::string> order;
  std::istringstream lines(read_file(events));
  for (std::string line; std::getline(lines, line);) {
    auto event = nlohmann::json::parse(line);
    auto name = event.at("event").get<std::string>();
    if (name == "worker_exit" && event.at("local_rank") == 1) {
      CHECK(event.at("exit_code") == 5);
      CHECK(event.at("time").get<double>() - exited_at < 5.0);  // generous: it is milliseconds
      order.push_back("exit 1");
    } else if (name == "finish") {
      CHECK(event.at("exit_code") == 5);
      order.push_back("finish");
    }
  }
  CHECK(order == std::vector<std::string>{"exit 1", "finish"});

  // The console dropped lines and said so on stderr; the log file has every byte.
  CHECK_THAT(pipeline.err(), Contains("ddplaunch: console blocked: dropped"));
  auto log = find_file(logs, "/attempt_0/0/stdout.log");
  REQUIRE_FALSE(log.empty());
  std::string expected_line = std::string(99, '0') + "\n";
  std::string text = read_file(log);
  CHECK(text.size() == kFloodLines * expected_line.size());
  CHECK(text.find_first_not_of("0\n") == std::string::npos);
}

// The agent's own notices and the failure summary go through the Console too
// (AgentOptions::notice_console): a stderr nobody reads holds neither.
TEST_CASE("a stderr nobody reads does not hold the failure summary (or the agent)", "[process]") {
  TempDir dir;
  auto events = dir.path() / "events.jsonl";
  auto rc_file = dir.path() / "rc";
  // stdout to a file; stderr (worker stderr lines, notices, the summary) a pipe into sleep.
  std::string command =
      "{ " + kDdplaunch + " --slow_console=drop --nproc_per_node 2 --standalone --events_file " +
      events.string() + " --no_python " + source_path("tests/launcher/workers/flood_then_fail.sh") +
      " 2>&1 >" + dir.file("out") + "; echo $? > " + rc_file.string() + "; } | sleep 120";
  ChildOptions options;
  options.argv = {"/bin/sh", "-c", command};
  options.env = {{"OUT_DIR", dir.path().string()}, {"FLOOD_LINES", "80000"}, {"FLOOD_FD", "2"}};
  options.own_process_group = true;
  ChildProcess pipeline(options);
  REQUIRE(wait_until([&] { return read_file(rc_file).ends_with("\n"); }, 60s));
  CHECK(read_file(rc_file) == "5\n");
  CHECK_THAT(read_file(events), Contains("\"event\":\"finish\""));
}
