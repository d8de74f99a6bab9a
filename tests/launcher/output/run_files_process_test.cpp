// The real ddplaunch and the files a run leaves: --log_dir reused by a second run, the
// temporary directory of a SIGKILLed agent, and the error file a failure summary names.
#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <regex>

#include "tests/support/files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/wait_until.hpp"

using namespace ddp::test;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

constexpr auto kRunTimeout = 60s;
const std::string kDdplaunch = build_path("ddplaunch");

ChildOptions launch(std::vector<std::string> args, const TempDir& dir,
                    std::map<std::string, std::string> env = {}) {
  ChildOptions options;
  options.argv = {kDdplaunch};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.env = std::move(env);
  options.env["OUT_DIR"] = dir.path().string();
  return options;
}

// The entries of dir whose names start with prefix.
std::vector<std::filesystem::path> entries(const std::filesystem::path& dir,
                                           const std::string& prefix) {
  std::vector<std::filesystem::path> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().starts_with(prefix)) found.push_back(entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

TEST_CASE("two runs with the same --log_dir keep both runs' files", "[process]") {
  TempDir dir;
  auto logs = dir.path() / "logs";
  // The default run id (`none`) both times; --master_port=0 only avoids busy ports.
  std::vector<std::string> args = {"--nproc_per_node=2",
                                   "--master_port=0",
                                   "--log_dir",
                                   logs.string(),
                                   "-t",
                                   "3",
                                   source_path("tests/launcher/workers/chatty.sh")};
  ChildProcess first(launch(args, dir, {{"LINES", "1"}}));
  REQUIRE(first.wait_for(kRunTimeout) == 0);
  ChildProcess second(launch(args, dir, {{"LINES", "2"}}));
  REQUIRE(second.wait_for(kRunTimeout) == 0);

  auto runs = entries(logs, "none_");  // torchrun's <run_id>_<random>
  REQUIRE(runs.size() == 2);
  std::vector<std::string> lines;
  for (const auto& run : runs) {
    auto log = read_file(run / "attempt_0" / "0" / "stdout.log");
    lines.push_back(std::to_string(std::count(log.begin(), log.end(), '\n')));
  }
  std::sort(lines.begin(), lines.end());
  // LINES newlines: the file has the bytes as the worker wrote them, the unfinished tail line
  // without a newline added.
  CHECK(lines == std::vector<std::string>{"1", "2"});
  // Each run says where its logs go.
  CHECK_THAT(first.err(), Contains("ddplaunch: log directory set to: " + logs.string() + "/none_"));
  CHECK(first.err() != second.err());
}

TEST_CASE("a SIGKILLed agent's temporary directory is removed when the next agent starts",
          "[process]") {
  TempDir dir;
  TempDir tmp;  // the agents' TMPDIR, so only their directories are in it
  std::map<std::string, std::string> env = {{"TMPDIR", tmp.path().string()}};
  ChildProcess killed(launch({"--nproc_per_node=1", "--standalone", "/bin/sh", "-c",
                              "touch \"$OUT_DIR/ready_$$\"; exec sleep 60"},
                             dir, env));
  REQUIRE(wait_until([&] { return !entries(dir.path(), "ready_").empty(); }, 30s));
  auto left = entries(tmp.path(), "ddplaunch_");
  REQUIRE(left.size() == 1);

  // While its agent lives, another agent leaves the directory alone.
  ChildProcess neighbour(launch({"--nproc_per_node=1", "--standalone", "/bin/true"}, dir, env));
  REQUIRE(neighbour.wait_for(kRunTimeout) == 0);
  CHECK(std::filesystem::exists(left[0]));

  killed.signal(SIGKILL);
  REQUIRE(killed.wait_for(kRunTimeout) == 128 + SIGKILL);
  CHECK(std::filesystem::exists(left[0]));  // nothing ran its cleanup
  ChildProcess next(launch({"--nproc_per_node=1", "--standalone", "/bin/true"}, dir, env));
  REQUIRE(next.wait_for(kRunTimeout) == 0);
  CHECK_FALSE(std::filesystem::exists(left[0]));
  CHECK(entries(tmp.path(), "ddplaunch_").empty());  // and each agent removed its own
}

TEST_CASE("without --log_dir the summary's error_file still exists after the agent exits",
          "[process]") {
  TempDir dir;
  TempDir tmp;
  ChildProcess agent(launch(
      {"--nproc_per_node=2", "--standalone", source_path("tests/launcher/workers/fail_rank.sh")},
      dir,
      {{"TMPDIR", tmp.path().string()},
       {"FAIL_RANK", "1"},
       {"FAIL_CODE", "7"},
       {"ERROR_MESSAGE", "ValueError: loss is NaN"}}));
  REQUIRE(agent.wait_for(kRunTimeout) == 7);
  auto err = agent.err();
  std::smatch m;
  REQUIRE(std::regex_search(err, m, std::regex(R"(error_file: (\S+))")));
  std::filesystem::path error_file = m[1].str();
  CHECK(std::filesystem::exists(error_file));
  CHECK_THAT(read_file(error_file), Contains("loss is NaN"));
  // One line says where the kept directory is.
  auto kept = entries(tmp.path(), "ddplaunch_");
  REQUIRE(kept.size() == 1);
  CHECK_THAT(err, Contains("kept in " + kept[0].string()));
  CHECK(error_file.string().starts_with(kept[0].string()));
}
