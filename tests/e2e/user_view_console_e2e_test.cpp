// What several ranks look like on one console: identical lines collapsed, progress bars on a
// terminal (tmux) and in a pipe, the failure summary's time and host, the file-timer hint.
// Real ddplaunch runs, outcomes written down.
#include <sys/stat.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <ctime>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>

#include "tests/e2e/agent_process.hpp"
#include "tests/support/files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/wait_until.hpp"

using namespace ddp::test;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

constexpr auto kGuard = 120s;
const std::string kDdplaunch = build_path("ddplaunch");

ProcessResult launch(const std::vector<std::string>& args,
                     const std::map<std::string, std::string>& env = {}) {
  return run_ddplaunch(args, env, kGuard);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

size_t count_matching(const std::vector<std::string>& lines, const std::regex& pattern) {
  return static_cast<size_t>(std::count_if(lines.begin(), lines.end(), [&](const auto& line) {
    return std::regex_search(line, pattern);
  }));
}

// "0-2,5" -> {0, 1, 2, 5}.
std::vector<int> parse_rank_set(const std::string& text) {
  std::vector<int> ranks;
  std::istringstream in(text);
  for (std::string part; std::getline(in, part, ',');) {
    const auto dash = part.find('-');
    const int first = std::stoi(part.substr(0, dash));
    const int last = dash == std::string::npos ? first : std::stoi(part.substr(dash + 1));
    for (int rank = first; rank <= last; ++rank) ranks.push_back(rank);
  }
  return ranks;
}

// The console's worker lines, each given back to every rank its prefix names.
std::map<int, std::vector<std::string>> lines_per_rank(const std::string& output) {
  std::map<int, std::vector<std::string>> per_rank;
  const std::regex worker_line(R"(^\[default([0-9,\-]+)\]:(.*)$)");
  for (const auto& line : lines_of(output)) {
    std::smatch match;
    if (!std::regex_match(line, match, worker_line)) continue;
    for (int rank : parse_rank_set(match[1])) per_rank[rank].push_back(match[2]);
  }
  return per_rank;
}

// A progress bar written the way tqdm writes one to stderr: '\r' and the new state per update,
// a newline after the last; 60 steps, 25 updates a second.
constexpr const char* kBarScript = R"(import os, sys, time
rank = int(os.environ["LOCAL_RANK"])
total = 60
for step in range(total + 1):
    filled = step * 20 // total
    bar = "%3d%%|%s%s| %d/%d" % (step * 100 // total, "#" * filled, " " * (20 - filled), step, total)
    sys.stderr.write("\r" + bar)
    sys.stderr.flush()
    if step < total:
        time.sleep(0.04)
sys.stderr.write("\n")
print("rank %d done" % rank, flush=True)
)";

// A tmux server of its own (its socket in dir), one session running command; killed at the end.
class Tmux {
 public:
  Tmux(const std::filesystem::path& dir, const std::string& command)
      : socket_((dir / "tmux.sock").string()) {
    auto started = tmux({"new-session", "-d", "-x", "160", "-y", "40", "-s", "job", command});
    REQUIRE(started.exit_code == 0);
  }
  ~Tmux() { tmux({"kill-server"}); }
  Tmux(const Tmux&) = delete;
  Tmux& operator=(const Tmux&) = delete;
  // The screen and its scrollback, as the terminal shows them.
  std::string screen() const {
    return tmux({"capture-pane", "-p", "-t", "job", "-S", "-", "-E", "-"}).output;
  }

 private:
  ProcessResult tmux(std::vector<std::string> args) const {
    std::vector<std::string> argv = {"/usr/bin/tmux", "-S", socket_};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(argv, 30s);
  }
  std::string socket_;
};

// The local "%Y-%m-%d_%H:%M:%S.mmm" of a file's modification time (to the nearest ms).
std::string mtime_text(const std::filesystem::path& path) {
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  const auto ms =
      std::chrono::round<std::chrono::milliseconds>(std::chrono::seconds(info.st_mtim.tv_sec) +
                                                    std::chrono::nanoseconds(info.st_mtim.tv_nsec))
          .count();
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  ::localtime_r(&seconds, &tm);
  char text[64];
  std::strftime(text, sizeof(text), "%Y-%m-%d_%H:%M:%S", &tm);
  char fraction[16];
  std::snprintf(fraction, sizeof(fraction), ".%03d", static_cast<int>(ms % 1000));
  return std::string(text) + fraction;
}

// The lines of one rank's bar (states with "%|") in text, its prefix's ranks expanded.
std::vector<std::string> bar_lines(const std::string& text, int rank) {
  std::vector<std::string> bars;
  const auto per_rank = lines_per_rank(text);
  if (per_rank.count(rank) == 0) return bars;
  for (const auto& line : per_rank.at(rank)) {
    if (line.find("%|") != std::string::npos) bars.push_back(line);
  }
  return bars;
}

}  // namespace

TEST_CASE(
    "8 ranks: identical lines print once with their ranks, the others per rank, in order, and "
    "the files keep every line",
    "[e2e][user_view][collapse]") {
  TempDir dir;
  // The ranks meet at a barrier of files first, so their lines come within the window, and at
  // another before they exit.
  auto script = dir.write("same.py", R"(import os, sys, time
rank = int(os.environ["LOCAL_RANK"])
barrier = os.environ["OUT_DIR"]
open(os.path.join(barrier, "ready_%d" % rank), "w").close()
while len([f for f in os.listdir(barrier) if f.startswith("ready_")]) < 8:
    time.sleep(0.005)
print("UserWarning: the same deprecation notice", flush=True)
print("rank %d has its own line" % rank, flush=True)
if rank % 2 == 0:
    print("only the even ranks say this", flush=True)
print("epoch 3", flush=True)
sys.stderr.write("the same on stderr\n")
sys.stderr.flush()
# And again before leaving: a rank that exits lets its held lines out at once, so one that
# left before a slow rank printed would print its lines without that rank's.
open(os.path.join(barrier, "done_%d" % rank), "w").close()
while len([f for f in os.listdir(barrier) if f.startswith("done_")]) < 8:
    time.sleep(0.005)
)");
  const auto logs = dir.path() / "logs";
  // A window of 20 s instead of 250 ms: eight Python processes leaving a barrier on a loaded
  // 2-core machine may be a second apart, and what is checked is the collapse, not its window.
  auto run = launch({"--nproc_per_node=8", "--standalone", "--run_id=same", "-t", "3", "--log_dir",
                     logs.string(), "--log_collapse=20000", script},
                    {{"OUT_DIR", dir.path().string()}});
  INFO(run.output);
  // Expected: exit 0. Each line all 8 ranks printed is one line prefixed [default0-7]:, the
  // even ranks' one line [default0,2,4,6]:, and each rank's own line stays its own.
  REQUIRE(run.exit_code == 0);
  const auto lines = lines_of(run.output);
  CHECK(count_matching(
            lines, std::regex(R"(^\[default0-7\]:UserWarning: the same deprecation notice$)")) ==
        1);
  CHECK(count_matching(lines, std::regex("deprecation notice")) == 1);
  CHECK(count_matching(lines, std::regex(R"(^\[default0-7\]:epoch 3$)")) == 1);
  CHECK(count_matching(lines, std::regex(R"(^\[default0-7\]:the same on stderr$)")) == 1);
  CHECK(count_matching(lines, std::regex(R"(^\[default0,2,4,6\]:only the even ranks say this$)")) ==
        1);
  for (int rank = 0; rank < 8; ++rank) {
    const std::string own =
        "[default" + std::to_string(rank) + "]:rank " + std::to_string(rank) + " has its own line";
    CHECK(std::count(lines.begin(), lines.end(), own) == 1);
  }
  // Every rank's stdout lines, given back to it from the collapsed ones, in its own order.
  const auto per_rank = lines_per_rank(run.output);
  for (int rank = 0; rank < 8; ++rank) {
    std::vector<std::string> expected = {"UserWarning: the same deprecation notice",
                                         "rank " + std::to_string(rank) + " has its own line"};
    if (rank % 2 == 0) expected.emplace_back("only the even ranks say this");
    expected.emplace_back("epoch 3");
    std::vector<std::string> seen;
    for (const auto& line : per_rank.at(rank)) {
      if (line != "the same on stderr") seen.push_back(line);
    }
    CHECK(seen == expected);
  }
  // The -t files are each rank's own, every line.
  size_t files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(logs)) {
    if (entry.path().filename() != "stdout.log") continue;
    const int rank = std::stoi(entry.path().parent_path().filename().string());
    std::string expected = "UserWarning: the same deprecation notice\nrank " +
                           std::to_string(rank) + " has its own line\n";
    if (rank % 2 == 0) expected += "only the even ranks say this\n";
    expected += "epoch 3\n";
    CHECK(read_file(entry.path()) == expected);
    CHECK(read_file(entry.path().parent_path() / "stderr.log") == "the same on stderr\n");
    ++files;
  }
  CHECK(files == 8);

  // Expected with --log_collapse off: one line per rank, as before.
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (entry.path().filename().string().starts_with("ready_")) std::filesystem::remove(entry);
  }
  auto plain = launch({"--nproc_per_node=8", "--standalone", "--log_collapse", "off", script},
                      {{"OUT_DIR", dir.path().string()}});
  INFO(plain.output);
  REQUIRE(plain.exit_code == 0);
  const auto plain_lines = lines_of(plain.output);
  CHECK(count_matching(plain_lines, std::regex(R"(^\[default[0-7]\]:epoch 3$)")) == 8);
  CHECK(count_matching(plain_lines, std::regex(R"(^\[default[0-9,\-]{2,}\]:)")) == 0);
}

TEST_CASE(
    "a tqdm-like bar of 2 ranks on a terminal: each rank's bar redrawn in place on a line "
    "of its own",
    "[e2e][user_view][bars]") {
  TempDir dir;
  auto script = dir.write("bar.py", kBarScript);
  const auto done = dir.path() / "exit_code";
  Tmux tmux(dir.path(), kDdplaunch + " --nproc_per_node=2 --standalone " + script + "; echo $? > " +
                            done.string() + "; sleep 600");
  // While the bars run, every look at the screen shows at most one bar line per rank.
  std::string screen;
  size_t looks = 0;
  bool both_shown = false;
  const auto bar_of = [](int rank) {
    return std::regex(R"(^\[default)" + std::to_string(rank) + R"(\]: *[0-9]+%\|)");
  };
  wait_until(
      [&] {
        screen = tmux.screen();
        ++looks;
        const auto lines = lines_of(screen);
        const size_t bars0 = count_matching(lines, bar_of(0));
        const size_t bars1 = count_matching(lines, bar_of(1));
        INFO(screen);
        CHECK(bars0 <= 1);
        CHECK(bars1 <= 1);
        if (bars0 == 1 && bars1 == 1 && screen.find("60/60") == std::string::npos) {
          both_shown = true;
        }
        return !read_file(done).empty();
      },
      kGuard);
  INFO(screen);
  CHECK(read_file(done) == "0\n");
  CHECK(looks > 1);
  CHECK(both_shown);  // mid-run, both ranks' bars were on the screen at once
  // At the end: each rank's final state is one line of the scrollback (one line for both when
  // they came within the collapse window), then its "done" line; no intermediate state was
  // left behind (torchrun and ddplaunch before printed 117 lines).
  screen = tmux.screen();
  const auto lines = lines_of(screen);
  CHECK(count_matching(lines, std::regex(R"(%\|)")) <= 2);
  for (int rank : {0, 1}) {
    CHECK(bar_lines(screen, rank) == std::vector<std::string>{"100%|####################| 60/60"});
  }
  CHECK(count_matching(lines, std::regex(R"(^\[default[01]\]:rank [01] done$)")) == 2);
}

TEST_CASE("the same bars into a pipe and a file: thinned, the last state always there",
          "[e2e][user_view][bars]") {
  TempDir dir;
  auto script = dir.write("bar.py", kBarScript);
  const auto logs = dir.path() / "logs";
  auto run = launch({"--nproc_per_node=2", "--standalone", "--run_id=bars", "-t", "3", "--log_dir",
                     logs.string(), script});
  INFO(run.output);
  // Expected: exit 0; per rank a few lines of its bar (its first state, its newest one every
  // 5 s, its last), not one per update; the last state (60/60) of each; the -t files keep
  // every update as written.
  REQUIRE(run.exit_code == 0);
  for (int rank : {0, 1}) {
    // Its prefix may name both ranks: the same state of both within the collapse window.
    const auto states = bar_lines(run.output, rank);
    CHECK(states.size() >= 2);
    CHECK(states.size() <= 10);  // of 61 updates
    CHECK(states.front() == "  0%|                    | 0/60");
    CHECK(states.back() == "100%|####################| 60/60");
  }
  CHECK(run.output.find('\r') == std::string::npos);  // lines, no redraws, in a pipe
  size_t files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(logs)) {
    if (entry.path().filename() != "stderr.log") continue;
    const auto text = read_file(entry.path());
    CHECK(std::count(text.begin(), text.end(), '\r') == 61);
    CHECK_THAT(text, Contains("100%|####################| 60/60\n"));
    ++files;
  }
  CHECK(files == 2);

  // Expected with --progress_bars raw: every one of the 2 x 61 states reaches the pipe, as it
  // did before thinning (each a redraw or, where the ranks alternate, a line).
  auto raw = launch({"--nproc_per_node=2", "--standalone", "--progress_bars", "raw", script});
  INFO(raw.output);
  REQUIRE(raw.exit_code == 0);
  std::string redraws = raw.output;
  std::replace(redraws.begin(), redraws.end(), '\r', '\n');
  CHECK(count_matching(lines_of(redraws), std::regex(R"(%\|)")) >= 100);
}

TEST_CASE(
    "the failure summary: the error file's time to the millisecond, the host as "
    "socket.getfqdn() says",
    "[e2e][user_view][summary]") {
  TempDir dir;
  // PyTorch's @record writes whole seconds (str(int(time.time()))).
  auto script = dir.write("fail.py", R"(import json, os, sys, time
if os.environ["LOCAL_RANK"] == "1":
    with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
        json.dump({"message": {"message": "ValueError: loss is NaN", "extraInfo": {
            "py_callstack": "Traceback (most recent call last): ...", "timestamp": str(int(time.time()))}}}, f)
    sys.exit(7)
time.sleep(60)
)");
  const auto logs = dir.path() / "logs";
  auto run = launch({"--nproc_per_node=2", "--standalone", "--run_id=summary", "--log_dir",
                     logs.string(), script});
  INFO(run.output);
  REQUIRE(run.exit_code == 7);
  std::filesystem::path error_file;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(logs)) {
    if (entry.path().filename() == "error.json" && entry.path().parent_path().filename() == "1") {
      error_file = entry.path();
    }
  }
  REQUIRE(!error_file.empty());
  // Expected: the root cause's time is when the file was written, with its milliseconds
  // (the file's modification time; not ".000"), and the host is Python's getfqdn().
  CHECK_THAT(run.output, Contains("  time      : " + mtime_text(error_file) + "\n"));
  const auto fqdn =
      run_process({"/usr/bin/python3", "-c", "import socket; print(socket.getfqdn())"}, 30s);
  REQUIRE(fqdn.exit_code == 0);
  CHECK_THAT(run.output, Contains("  host      : " + fqdn.output));
  CHECK_THAT(run.output, Contains("message   : ValueError: loss is NaN"));
  // Rank 0, stopped by ddplaunch's SIGTERM, did not fail on its own: not listed (docs/cli.md).
  CHECK_THAT(run.output, Contains("Failures:\n  <NO_OTHER_FAILURES>"));
}

TEST_CASE("a script using FileTimerClient without the file timer gets a one-line hint",
          "[e2e][user_view][hang]") {
  TempDir dir;
  // The text is what counts: the import never runs (no torch needed).
  auto script = dir.write("timer.py", R"(import os
if os.environ.get("NEVER"):
    from torch.distributed.elastic.timer import FileTimerClient
print("TIMER_FILE", os.environ.get("TORCHELASTIC_TIMER_FILE", "unset"))
)");
  auto run = launch({"--nproc_per_node=2", "--standalone", script});
  INFO(run.output);
  // Expected: exit 0, one hint (per job, not per rank) naming --hang_timeout and
  // TORCHELASTIC_ENABLE_FILE_TIMER=1; the workers have no timer file.
  CHECK(run.exit_code == 0);
  const auto lines = lines_of(run.output);
  CHECK(count_matching(lines, std::regex("uses torch's FileTimerClient, but the file timer is "
                                         "off.*--hang_timeout SECONDS.*"
                                         "TORCHELASTIC_ENABLE_FILE_TIMER=1")) == 1);
  CHECK_THAT(run.output, Contains("TIMER_FILE unset"));

  // Expected with --hang_timeout: the file timer is served (no hint, a FIFO for every worker).
  auto timed = launch({"--nproc_per_node=2", "--standalone", "--hang_timeout=60", script});
  INFO(timed.output);
  CHECK(timed.exit_code == 0);
  CHECK_THAT(timed.output, !Contains("FileTimerClient"));
  CHECK(count_matching(lines_of(timed.output), std::regex(R"(TIMER_FILE /.*timer\.fifo$)")) >= 1);
  CHECK_THAT(timed.output, !Contains("TIMER_FILE unset"));

  // Expected with TORCHELASTIC_ENABLE_FILE_TIMER=1, as under torchrun: no hint either.
  auto enabled = launch({"--standalone", script}, {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}});
  CHECK(enabled.exit_code == 0);
  CHECK_THAT(enabled.output, !Contains("FileTimerClient"));
}
