// The real ddplaunch binary with real worker processes: env contract, exit codes,
// restarts, failure summaries, signals, nohup, orphans, logs, events and bad flags.
#include <catch2/catch.hpp>
#include <csignal>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
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

std::string worker_script(const std::string& name) {
  return source_path("tests/launcher/workers/" + name);
}

std::map<std::string, std::string> parse_env_file(const std::filesystem::path& path) {
  std::map<std::string, std::string> env;
  std::istringstream lines(read_file(path));
  for (std::string line; std::getline(lines, line);) {
    auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

ChildOptions launch(std::vector<std::string> args, const TempDir& dir,
                    std::map<std::string, std::string> env = {}) {
  ChildOptions options;
  options.argv = {kDdplaunch};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.env = std::move(env);
  options.env["OUT_DIR"] = dir.path().string();
  return options;
}

pid_t read_pid(const std::filesystem::path& path) {
  auto text = read_file(path);
  return text.empty() ? -1 : static_cast<pid_t>(std::stol(text));
}

}  // namespace

TEST_CASE("each worker gets the env contract, field by field", "[process]") {
  TempDir dir;
  ChildProcess agent(launch({"--nproc_per_node=2", "--standalone", "--max_restarts=3",
                             "--role=trainer", worker_script("env_dump.sh")},
                            dir, {{"KEEP_ME", "yes"}}));
  REQUIRE(agent.wait_for(kRunTimeout) == 0);
  auto env0 = parse_env_file(dir.path() / "env_0.txt");
  auto env1 = parse_env_file(dir.path() / "env_1.txt");
  CHECK(env0["RANK"] == "0");
  CHECK(env1["RANK"] == "1");
  CHECK(env0["LOCAL_RANK"] == "0");
  CHECK(env1["LOCAL_RANK"] == "1");
  for (auto* env : {&env0, &env1}) {
    auto& e = *env;
    CHECK(e["WORLD_SIZE"] == "2");
    CHECK(e["LOCAL_WORLD_SIZE"] == "2");
    CHECK(e["GROUP_RANK"] == "0");
    CHECK(e["GROUP_WORLD_SIZE"] == "1");
    CHECK(e["ROLE_NAME"] == "trainer");
    CHECK(e["ROLE_WORLD_SIZE"] == "2");
    CHECK(e["MASTER_ADDR"] == "127.0.0.1");
    CHECK(std::stoi(e["MASTER_PORT"]) > 0);
    CHECK(e["MASTER_PORT"] != "29500");  // --standalone: a free port, bound by the agent
    CHECK(e["TORCHELASTIC_RESTART_COUNT"] == "0");
    CHECK(e["TORCHELASTIC_MAX_RESTARTS"] == "3");
    CHECK(e["TORCHELASTIC_USE_AGENT_STORE"] == "True");
    CHECK(e["TORCHELASTIC_ERROR_FILE"].ends_with("/error.json"));
    CHECK(e["OMP_NUM_THREADS"] == "1");
    CHECK(e["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1");
    CHECK(e["NCCL_ASYNC_ERROR_HANDLING"] == "1");
    CHECK(e["KEEP_ME"] == "yes");
  }
  CHECK(env0["TORCHELASTIC_RUN_ID"] == env1["TORCHELASTIC_RUN_ID"]);
  CHECK(env0["ROLE_RANK"] == "0");
  CHECK(env1["ROLE_RANK"] == "1");
  CHECK(env0["MASTER_PORT"] == env1["MASTER_PORT"]);
  CHECK(env0["TORCHELASTIC_ERROR_FILE"] != env1["TORCHELASTIC_ERROR_FILE"]);
  // One notice line about OMP_NUM_THREADS.
  CHECK_THAT(agent.err(), Contains("OMP_NUM_THREADS=1"));
}

TEST_CASE("restarts are counted and the group restarts until one attempt succeeds", "[process]") {
  TempDir dir;
  ChildProcess agent(launch(
      {"--nproc_per_node=2", "--max_restarts=3", "--standalone", worker_script("fail_rank.sh")},
      dir, {{"FAIL_RANK", "1"}, {"FAIL_CODE", "3"}, {"SUCCEED_AT", "2"}}));
  REQUIRE(agent.wait_for(kRunTimeout) == 0);
  CHECK(read_file(dir.path() / "attempts_0") == "0\n1\n2\n");
  CHECK(read_file(dir.path() / "attempts_1") == "0\n1\n2\n");
  CHECK_THAT(agent.err(), Contains("restarting, attempt 2 of 3"));
}

TEST_CASE("the agent exits with the root-cause worker's status", "[process]") {
  TempDir dir;
  SECTION("an exit code") {
    ChildProcess agent(launch({"--nproc_per_node=3", "--standalone", worker_script("fail_rank.sh")},
                              dir, {{"FAIL_RANK", "2"}, {"FAIL_CODE", "42"}}));
    CHECK(agent.wait_for(kRunTimeout) == 42);
  }
  SECTION("a signal: 128+N") {
    ChildProcess agent(launch({"--nproc_per_node=2", "--standalone", worker_script("fail_rank.sh")},
                              dir,
                              {{"FAIL_RANK", "0"}, {"FAIL_SIGNAL", "SEGV"}, {"FAIL_CODE", "1"}}));
    CHECK(agent.wait_for(kRunTimeout) == 128 + SIGSEGV);
    CHECK_THAT(agent.err(), Contains("SIGSEGV"));
  }
}

TEST_CASE("a failed group prints a torchrun-style summary from the error file", "[process]") {
  TempDir dir;
  ChildProcess agent(launch(
      {"--nproc_per_node=2", "--standalone", worker_script("fail_rank.sh")}, dir,
      {{"FAIL_RANK", "1"}, {"FAIL_CODE", "7"}, {"ERROR_MESSAGE", "ValueError: loss is NaN"}}));
  REQUIRE(agent.wait_for(kRunTimeout) == 7);
  auto err = agent.err();
  CHECK_THAT(err, Contains("fail_rank.sh FAILED"));
  CHECK_THAT(err, Contains("Root Cause (first observed failure):"));
  CHECK_THAT(err, Contains("rank      : 1 (local_rank: 1)"));
  CHECK_THAT(err, Contains("exitcode  : 7 (pid: "));
  CHECK_THAT(err, Contains("message   : ValueError: loss is NaN"));
  CHECK_THAT(err, Contains("Traceback: fail_rank.sh line 15"));
  CHECK_THAT(err, Contains("<NO_OTHER_FAILURES>"));
  CHECK_THAT(agent.err(), Contains("[default1]:rank 1 failing"));
}

TEST_CASE("signals to the agent are forwarded to every worker, exit 128+N", "[process]") {
  auto sig = GENERATE(SIGTERM, SIGUSR1, SIGINT);
  const std::map<int, std::string> names = {{SIGTERM, "TERM"}, {SIGUSR1, "USR1"}, {SIGINT, "INT"}};
  TempDir dir;
  ChildProcess agent(
      launch({"--nproc_per_node=2", "--standalone", worker_script("trap_signals.py")}, dir,
             {{"PYTHON_EXEC", "/usr/bin/python3"}}));
  REQUIRE(wait_until(
      [&] {
        return std::filesystem::exists(dir.path() / "ready_0") &&
               std::filesystem::exists(dir.path() / "ready_1");
      },
      30s));
  ::kill(agent.pid(), sig);
  CHECK(agent.wait_for(kRunTimeout) == 128 + sig);
  CHECK(read_file(dir.path() / "signal_0") == names.at(sig) + "\n");
  CHECK(read_file(dir.path() / "signal_1") == names.at(sig) + "\n");
}

TEST_CASE("under nohup, SIGHUP to the agent changes nothing", "[process]") {
  TempDir dir;
  auto options = launch({"--nproc_per_node=2", "--standalone", worker_script("trap_signals.py")},
                        dir, {{"PYTHON_EXEC", "/usr/bin/python3"}});
  options.ignore_sighup = true;
  ChildProcess agent(options);
  REQUIRE(wait_until(
      [&] {
        return std::filesystem::exists(dir.path() / "ready_0") &&
               std::filesystem::exists(dir.path() / "ready_1");
      },
      30s));
  ::kill(agent.pid(), SIGHUP);
  // Room for a wrongly forwarded SIGHUP to land before the workers are told to finish.
  std::this_thread::sleep_for(300ms);
  std::ofstream(dir.path() / "go") << "go";
  CHECK(agent.wait_for(kRunTimeout) == 0);
  CHECK_FALSE(std::filesystem::exists(dir.path() / "signal_0"));
  CHECK_FALSE(std::filesystem::exists(dir.path() / "signal_1"));
  CHECK_THAT(agent.out(), Contains("[default0]:rank 0 done"));
  CHECK_THAT(agent.out(), Contains("[default1]:rank 1 done"));
}

TEST_CASE("SIGKILL of the agent leaves no orphan, not even a wrapper's child", "[process]") {
  TempDir dir;
  ChildProcess agent(
      launch({"--nproc_per_node=2", "--standalone", worker_script("wrapper_with_child.sh")}, dir,
             {{"FAIL_RANK", "none"}}));
  std::vector<std::filesystem::path> pid_files;
  for (const char* kind : {"wrapper_", "child_"}) {
    for (int rank = 0; rank < 2; ++rank) {
      pid_files.push_back(dir.path() / (kind + std::to_string(rank)));
    }
  }
  REQUIRE(wait_until(
      [&] {
        for (const auto& file : pid_files) {
          if (read_pid(file) <= 0) return false;
        }
        return true;
      },
      30s));
  std::vector<pid_t> pids;
  for (const auto& file : pid_files) pids.push_back(read_pid(file));
  ::kill(agent.pid(), SIGKILL);
  REQUIRE(agent.wait_for(kRunTimeout) == 128 + SIGKILL);
  CHECK(all_gone(pids, 10s));
}

TEST_CASE("a normal stop also kills what the workers spawned", "[process]") {
  TempDir dir;
  ChildProcess agent(
      launch({"--nproc_per_node=2", "--standalone", worker_script("wrapper_with_child.sh")}, dir,
             {{"FAIL_RANK", "1"}}));
  CHECK(agent.wait_for(kRunTimeout) == 1);
  std::vector<pid_t> pids = {read_pid(dir.path() / "child_0"), read_pid(dir.path() / "child_1"),
                             read_pid(dir.path() / "wrapper_0")};
  CHECK(all_gone(pids, 10s));
}

TEST_CASE("heavy output: every line whole, prefixed, in order, never mixed", "[process]") {
  TempDir dir;
  constexpr int kLines = 20000;
  ChildProcess agent(launch({"--nproc_per_node=3", "--standalone", worker_script("chatty.sh")}, dir,
                            {{"LINES", std::to_string(kLines)}}));
  REQUIRE(agent.wait_for(kRunTimeout) == 0);
  std::regex line_re(
      R"(\[default(\d)\]:rank=(\d) line=(\d+) 0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz)");
  std::regex tail_re(R"(\[default(\d)\]:rank=(\d) tail-without-newline)");
  std::vector<int> next(3, 0);
  std::vector<int> tails(3, 0);
  int bad = 0;
  for (const auto& line : lines_of(agent.out())) {
    std::smatch m;
    if (std::regex_match(line, m, line_re) && m[1] == m[2]) {
      int rank = std::stoi(m[1]);
      if (std::stoi(m[3]) != next[static_cast<size_t>(rank)]++) ++bad;
    } else if (std::regex_match(line, m, tail_re) && m[1] == m[2]) {
      ++tails[static_cast<size_t>(std::stoi(m[1]))];
    } else {
      ++bad;
    }
  }
  CHECK(bad == 0);
  CHECK(next == std::vector<int>{kLines, kLines, kLines});
  CHECK(tails == std::vector<int>{1, 1, 1});  // partial last lines flushed at exit
}

TEST_CASE("log_dir layout, tee, local_ranks_filter and the events file", "[process]") {
  TempDir dir;
  auto events = dir.path() / "events.jsonl";
  ChildProcess agent(launch({"--nproc_per_node=2", "--standalone", "--run_id=myrun", "--log_dir",
                             (dir.path() / "logs").string(), "-t", "3", "--local_ranks_filter=1",
                             "--events_file", events.string(), worker_script("chatty.sh")},
                            dir, {{"LINES", "3"}}));
  REQUIRE(agent.wait_for(kRunTimeout) == 0);
  // torchrun's layout: <log_dir>/<run_id>_<random>/attempt_<n>/<local_rank>/.
  std::filesystem::path run;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path() / "logs")) {
    if (entry.path().filename().string().starts_with("myrun_")) run = entry.path();
  }
  REQUIRE_FALSE(run.empty());
  auto attempt = run / "attempt_0";
  auto log0 = read_file(attempt / "0" / "stdout.log");
  CHECK_THAT(log0, Contains("rank=0 line=2"));
  CHECK(std::filesystem::exists(attempt / "1" / "stderr.log"));
  CHECK(std::filesystem::is_directory(attempt / "0"));
  // Console: only local rank 1.
  CHECK_THAT(agent.out(), Contains("[default1]:rank=1 line=0"));
  CHECK(agent.out().find("[default0]") == std::string::npos);

  std::map<std::string, int> counts;
  for (const auto& line : lines_of(read_file(events))) {
    auto event = nlohmann::json::parse(line);
    counts[event.at("event").get<std::string>()]++;
    CHECK(event.at("time").get<double>() > 1.6e9);
    if (event["event"] == "worker_start" || event["event"] == "worker_exit") {
      CHECK(event.contains("rank"));
      CHECK(event.at("pid").get<int>() > 0);
    }
  }
  CHECK(counts["rendezvous"] == 1);
  CHECK(counts["worker_start"] == 2);
  CHECK(counts["worker_exit"] == 2);
  CHECK(counts["finish"] == 1);
}

TEST_CASE("bad flags: exit 2, the value named, nothing spawned", "[process]") {
  TempDir dir;
  auto marker = (dir.path() / "ran").string();
  ChildProcess agent(launch({"--nproc_per_node=0", "/usr/bin/touch", marker}, dir));
  CHECK(agent.wait_for(kRunTimeout) == 2);
  CHECK_THAT(agent.err(), Contains("--nproc_per_node=0"));
  CHECK_FALSE(std::filesystem::exists(marker));
  ChildProcess port(launch({"--master_port=65536", "/usr/bin/touch", marker}, dir));
  CHECK(port.wait_for(kRunTimeout) == 2);
  CHECK_THAT(port.err(), Contains("65536"));
  CHECK_FALSE(std::filesystem::exists(marker));
}

TEST_CASE("no_agent_store: workers are told to host the store themselves", "[process]") {
  TempDir dir;
  ChildProcess agent(launch(
      {"--nproc_per_node=2", "--standalone", "--no_agent_store", worker_script("env_dump.sh")},
      dir));
  REQUIRE(agent.wait_for(kRunTimeout) == 0);
  auto env0 = parse_env_file(dir.path() / "env_0.txt");
  CHECK(env0["TORCHELASTIC_USE_AGENT_STORE"] == "False");
  CHECK(std::stoi(env0["MASTER_PORT"]) > 0);
}

TEST_CASE("a worker program that cannot be executed fails with 127 and says why", "[process]") {
  TempDir dir;
  auto script = dir.path() / "bad_interpreter.sh";
  std::ofstream(script) << "#!/nonexistent/interpreter\n";
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  ChildProcess agent(launch({"--nproc_per_node=2", "--standalone", script.string()}, dir));
  auto status = agent.wait_for(kRunTimeout);
  INFO(agent.out() << agent.err());
  CHECK(status.value_or(-1) == 127);
  CHECK_THAT(agent.out() + agent.err(), Contains("exec failed: " + script.string()));
}

TEST_CASE("a console closed early (| head) does not kill the job", "[process]") {
  TempDir dir;
  ChildOptions options;
  options.argv = {"/bin/sh", "-c",
                  kDdplaunch +
                      " --nproc_per_node=2 --standalone /bin/sh -c "
                      "'i=0; while [ $i -lt 20000 ]; do echo line $i; i=$((i+1)); done; "
                      "touch \"$OUT_DIR/finished_$RANK\"' | head -n 1"};
  options.env = {{"OUT_DIR", dir.path().string()}};
  ChildProcess pipeline(options);
  REQUIRE(pipeline.wait_for(kRunTimeout) == 0);
  // head exits at once; the agent keeps draining the workers, which run to the end.
  CHECK(wait_until(
      [&] {
        return std::filesystem::exists(dir.path() / "finished_0") &&
               std::filesystem::exists(dir.path() / "finished_1");
      },
      30s));
}

TEST_CASE("DDPLAUNCH_LOG_LEVEL: debug adds lines, error keeps only errors, a bad value warns",
          "[process][log]") {
  // Rank 1 fails once: an info line (OMP_NUM_THREADS), a warning (the restart), debug lines
  // (each worker's start); the workers' own output is never filtered.
  const auto run = [](const std::string& level) {
    TempDir dir;
    ChildProcess agent(launch(
        {"--nproc_per_node=2", "--max_restarts=1", "--standalone", worker_script("fail_rank.sh")},
        dir,
        {{"FAIL_RANK", "1"},
         {"FAIL_CODE", "3"},
         {"SUCCEED_AT", "1"},
         {"DDPLAUNCH_LOG_LEVEL", level}}));
    REQUIRE(agent.wait_for(kRunTimeout) == 0);
    return agent.err() + agent.out();
  };
  const std::string info = run("info");
  INFO(info);
  CHECK_THAT(info, Contains("ddplaunch: setting OMP_NUM_THREADS=1"));
  CHECK_THAT(info, Contains("ddplaunch: worker group failed (rank 1: exit code 3)"));
  CHECK_THAT(info, !Contains("ddplaunch: started rank"));

  const std::string debug = run("debug");
  INFO(debug);
  CHECK_THAT(debug, Contains("ddplaunch: setting OMP_NUM_THREADS=1"));
  CHECK_THAT(debug, Contains("ddplaunch: started rank 1 (local_rank 1) as pid "));
  CHECK_THAT(debug, Contains("ddplaunch: rank 1 (pid "));

  const std::string error = run("error");
  INFO(error);
  CHECK_THAT(error, !Contains("ddplaunch: "));
  CHECK_THAT(error, Contains("[default1]:rank 1 failing"));

  const std::string bad = run("loud");
  INFO(bad);
  CHECK_THAT(bad, Contains("ddplaunch: DDPLAUNCH_LOG_LEVEL='loud' is not a log level (expected "
                           "error, warn, info or debug); using info"));
  CHECK_THAT(bad, Contains("ddplaunch: setting OMP_NUM_THREADS=1"));
}
