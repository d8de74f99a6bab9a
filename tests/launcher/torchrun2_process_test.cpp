// The real ddplaunch with torchrun 2.x's options: --signals_to_handle (and nohup),
// --shutdown_timeout, --virtual_local_rank, --duplicate_*_filters,
// TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, and command lines argparse would misread.
#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

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
const std::string kTrapSignals = source_path("tests/launcher/workers/trap_signals.py");

ChildOptions launch(std::vector<std::string> args, const TempDir& dir,
                    std::map<std::string, std::string> env = {}) {
  ChildOptions options;
  options.argv = {kDdplaunch};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.env = std::move(env);
  options.env["OUT_DIR"] = dir.path().string();
  options.env["PYTHON_EXEC"] = "/usr/bin/python3";
  return options;
}

// The pids of the two trap_signals.py workers, once both have their handlers in place.
std::vector<pid_t> wait_for_ready_workers(const TempDir& dir) {
  std::vector<pid_t> pids;
  bool ready = wait_until(
      [&] {
        pids.clear();
        for (int rank = 0; rank < 2; ++rank) {
          auto text = read_file(dir.path() / ("ready_" + std::to_string(rank)));
          if (text.empty()) return false;
          pids.push_back(static_cast<pid_t>(std::stol(text)));
        }
        return true;
      },
      30s);
  REQUIRE(ready);
  return pids;
}

std::set<std::string> line_set(const std::string& text) {
  std::set<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.insert(line);
  return lines;
}

std::map<std::string, std::string> parse_env_file(const std::filesystem::path& path) {
  std::map<std::string, std::string> env;
  for (const auto& line : line_set(read_file(path))) {
    auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

}  // namespace

TEST_CASE("a signal listed in --signals_to_handle is forwarded to every worker", "[process]") {
  TempDir dir;
  ChildProcess agent(launch(
      {"--nproc_per_node=2", "--standalone", "--signals_to_handle=SIGTERM,SIGUSR2", kTrapSignals},
      dir));
  wait_for_ready_workers(dir);
  ::kill(agent.pid(), SIGUSR2);
  CHECK(agent.wait_for(kRunTimeout) == 128 + SIGUSR2);
  CHECK_THAT(agent.err(), Contains("received SIGUSR2; forwarding it to the workers"));
  CHECK(read_file(dir.path() / "signal_0") == "USR2\n");
  CHECK(read_file(dir.path() / "signal_1") == "USR2\n");
}

TEST_CASE("a signal not listed keeps its default action: the agent dies, its workers with it",
          "[process]") {
  TempDir dir;
  ChildProcess agent(launch(
      {"--nproc_per_node=2", "--standalone", "--signals-to-handle", "SIGTERM", kTrapSignals}, dir));
  auto pids = wait_for_ready_workers(dir);
  ::kill(agent.pid(), SIGHUP);
  CHECK(agent.wait_for(kRunTimeout) == 128 + SIGHUP);
  // Not handled: nothing forwarded, no grace period; the guardian and PDEATHSIG end the workers.
  CHECK_FALSE(agent.err().find("received SIGHUP") != std::string::npos);
  CHECK(all_gone(pids, 10s));
  CHECK_FALSE(std::filesystem::exists(dir.path() / "signal_0"));
  CHECK_FALSE(std::filesystem::exists(dir.path() / "signal_1"));
}

TEST_CASE("a signal not listed, sent to the agent's process group, leaves no orphan behind",
          "[process]") {
  // The guardian shares the agent's process group: it must outlive the signal that ends the
  // agent, to kill what a wrapper's own children (no PDEATHSIG) would otherwise leave running.
  TempDir dir;
  auto options = launch({"--nproc_per_node=2", "--standalone", "--signals_to_handle=SIGTERM",
                         source_path("tests/launcher/workers/wrapper_with_child.sh")},
                        dir, {{"FAIL_RANK", "none"}});
  options.own_process_group = true;
  ChildProcess agent(options);
  std::vector<pid_t> pids;
  REQUIRE(wait_until(
      [&] {
        pids.clear();
        for (const char* kind : {"wrapper_", "child_"}) {
          for (int rank = 0; rank < 2; ++rank) {
            auto text = read_file(dir.path() / (kind + std::to_string(rank)));
            if (text.empty()) return false;
            pids.push_back(static_cast<pid_t>(std::stol(text)));
          }
        }
        return true;
      },
      30s));
  agent.signal(SIGALRM);
  CHECK(agent.wait_for(kRunTimeout) == 128 + SIGALRM);
  CHECK(all_gone(pids, 10s));
}

TEST_CASE("under nohup, SIGHUP stays ignored even when --signals_to_handle lists it", "[process]") {
  TempDir dir;
  auto options = launch(
      {"--nproc_per_node=2", "--standalone", "--signals_to_handle=SIGHUP,SIGTERM", kTrapSignals},
      dir);
  options.ignore_sighup = true;
  ChildProcess agent(options);
  wait_for_ready_workers(dir);
  ::kill(agent.pid(), SIGHUP);
  // Room for a wrongly forwarded SIGHUP to land before the workers are told to finish.
  std::this_thread::sleep_for(300ms);
  std::ofstream(dir.path() / "go") << "go";
  CHECK(agent.wait_for(kRunTimeout) == 0);
  CHECK_FALSE(std::filesystem::exists(dir.path() / "signal_0"));
  CHECK_FALSE(std::filesystem::exists(dir.path() / "signal_1"));
  CHECK_THAT(agent.out(), Contains("[default1]:rank 1 done"));
}

TEST_CASE("TORCH_ELASTIC_SHUTDOWN_TIMEOUT and --shutdown_timeout set the grace before SIGKILL",
          "[process]") {
  // Workers that ignore SIGTERM (sleep inherits the ignored disposition) outlive the grace.
  const std::string worker = "trap '' TERM; touch \"$OUT_DIR/ready_$LOCAL_RANK\"; sleep 60";
  auto flag = GENERATE(as<std::string>{}, "", "--shutdown_timeout=1");
  TempDir dir;
  std::map<std::string, std::string> env;
  if (flag.empty()) env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = "1";
  std::vector<std::string> args = {"--nproc_per_node=2", "--standalone"};
  if (!flag.empty()) args.push_back(flag);
  args.insert(args.end(), {"/bin/sh", "-c", worker});
  ChildProcess agent(launch(args, dir, env));
  REQUIRE(wait_until(
      [&] {
        return std::filesystem::exists(dir.path() / "ready_0") &&
               std::filesystem::exists(dir.path() / "ready_1");
      },
      30s));
  ::kill(agent.pid(), SIGTERM);
  CHECK(agent.wait_for(kRunTimeout) == 128 + SIGTERM);
  CHECK_THAT(agent.err(), Contains("workers still running 1000 ms after SIGTERM; sending SIGKILL"));
}

TEST_CASE("virtual_local_rank: each worker sees LOCAL_RANK=0 and only its own GPU", "[process]") {
  TempDir dir;
  ChildProcess agent(launch({"--nproc_per_node=2", "--standalone", "--virtual_local_rank",
                             "/bin/sh", "-c", "env > \"$OUT_DIR/env_rank$RANK.txt\""},
                            dir, {{"CUDA_VISIBLE_DEVICES", "5,7"}}));
  REQUIRE(agent.wait_for(kRunTimeout) == 0);
  auto rank0 = parse_env_file(dir.path() / "env_rank0.txt");
  auto rank1 = parse_env_file(dir.path() / "env_rank1.txt");
  CHECK(rank0["LOCAL_RANK"] == "0");
  CHECK(rank1["LOCAL_RANK"] == "0");
  CHECK(rank0["CUDA_VISIBLE_DEVICES"] == "5");
  CHECK(rank1["CUDA_VISIBLE_DEVICES"] == "7");
  CHECK(rank1["LOCAL_WORLD_SIZE"] == "2");
}

TEST_CASE("duplicate filters and TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE on a real run",
          "[process]") {
  TempDir dir;
  auto logs = dir.path() / "logs";
  // --log_collapse off: each rank's own "pear" and "plum" lines are what is checked (collapsed,
  // they would print once as <0-1/0-1>pear when both ranks print within the window).
  ChildProcess agent(launch(
      {"--nproc_per_node=2", "--standalone", "--log_dir", logs.string(), "--log_collapse=off",
       "--duplicate_stdout_filters=apple,kiwi", "--duplicate-stderr-filters", "orange", "/bin/sh",
       "-c", "echo \"apple $RANK\"; echo pear; echo \"orange $RANK\" >&2; echo plum >&2"},
      dir, {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "<${rank}/${local_rank}>"}}));
  REQUIRE(agent.wait_for(kRunTimeout) == 0);
  CHECK_THAT(agent.out(), Contains("<0/0>pear\n"));
  CHECK_THAT(agent.out(), Contains("<1/1>apple 1\n"));
  CHECK_THAT(agent.err(), Contains("<1/1>plum\n"));
  std::vector<std::filesystem::path> runs;
  for (const auto& entry : std::filesystem::directory_iterator(logs)) runs.push_back(entry.path());
  REQUIRE(runs.size() == 1);
  auto attempt = runs[0] / "attempt_0";
  CHECK(line_set(read_file(attempt / "filtered_stdout.log")) ==
        std::set<std::string>{"<0/0>apple 0", "<1/1>apple 1"});
  CHECK(line_set(read_file(attempt / "filtered_stderr.log")) ==
        std::set<std::string>{"<0/0>orange 0", "<1/1>orange 1"});
}

TEST_CASE("an abbreviated option is refused, and what follows the program is the program's",
          "[process]") {
  TempDir dir;
  SECTION("the abbreviation --nproc is not --nproc_per_node: exit 2, named, nothing run") {
    ChildProcess agent(launch({"--nproc", "3", "/bin/sh", "-c", "touch \"$OUT_DIR/ran\""}, dir));
    CHECK(agent.wait_for(kRunTimeout) == 2);
    CHECK_THAT(agent.err(), Contains("unknown option '--nproc'"));
    CHECK_FALSE(std::filesystem::exists(dir.path() / "ran"));
  }
  SECTION("launcher-like arguments after the program reach it exactly") {
    ChildProcess agent(
        launch({"--nproc_per_node=1", "/bin/sh", "-c", "printf '%s\\n' \"$@\" > \"$OUT_DIR/args\"",
                "sh", "--signal", "--nproc", "3", "--max_restarts"},
               dir));
    CHECK(agent.wait_for(kRunTimeout) == 0);
    CHECK(read_file(dir.path() / "args") == "--signal\n--nproc\n3\n--max_restarts\n");
  }
}
