// Log routing: whole prefixed lines, partial lines joined and flushed, -r/-t files, filters.
#include "launcher/output/log_router.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

using namespace ddp::launcher;

namespace {

// A temporary file standing in for the console, and the Console writing to it.
struct CaptureFile {
  CaptureFile() {
    path = std::filesystem::temp_directory_path() /
           ("log_router_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    console = std::make_unique<Console>(fd);
  }
  ~CaptureFile() {
    console.reset();
    ::close(fd);
    std::filesystem::remove(path);
  }
  // What the console wrote, once everything queued is out.
  std::string text() const {
    console->drain(std::chrono::seconds(10), std::chrono::seconds(10));
    std::ifstream in(path);
    std::stringstream buffer;
    buffer << in.rdbuf();
    return buffer.str();
  }
  static inline int counter = 0;
  std::filesystem::path path;
  int fd = -1;
  std::unique_ptr<Console> console;
};

// What a terminal shows after text: rows of characters, with the carriage return, the
// newline, cursor up (ESC [ N A) and erase below (ESC [ J) that the live area writes.
std::vector<std::string> screen_of(const std::string& text) {
  std::vector<std::string> rows(1);
  size_t row = 0;
  size_t column = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\x1b' && i + 1 < text.size() && text[i + 1] == '[') {
      size_t end = i + 2;
      while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end])) != 0) ++end;
      const size_t n = end > i + 2 ? std::stoul(text.substr(i + 2, end - i - 2)) : 1;
      if (text[end] == 'A') row -= std::min(row, n);
      if (text[end] == 'J') {
        rows.resize(row + 1);
        rows[row].resize(std::min(rows[row].size(), column));
      }
      i = end;
    } else if (c == '\r') {
      column = 0;
    } else if (c == '\n') {
      column = 0;
      if (++row == rows.size()) rows.emplace_back();
    } else {
      auto& line = rows[row];
      if (column < line.size()) {
        line[column] = c;
      } else {
        line.push_back(c);
      }
      ++column;
    }
  }
  if (rows.back().empty()) rows.pop_back();
  return rows;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

TEST_CASE("lines are prefixed, joined across chunks, and flushed at exit", "[logs]") {
  CaptureFile out, err;
  LogRouterOptions options;
  options.stdout_console = out.console.get();
  options.stderr_console = err.console.get();
  LogRouter router(options);
  router.begin_attempt(2, 0, std::nullopt);
  router.write(0, 1, "hel");
  router.write(1, 1, "other\nline two\npart");
  router.write(0, 1, "lo\n");
  router.write(1, 2, "oops\n");
  router.flush(1);
  router.end_attempt();
  CHECK(out.text() == "[default1]:other\n[default1]:line two\n[default0]:hello\n[default1]:part\n");
  CHECK(err.text() == "[default1]:oops\n");
}

TEST_CASE("the prefix template takes role, rank and local rank", "[logs]") {
  CHECK(LogRouter::expand_prefix("${role_name}/${rank}/${local_rank}> ", "w", 9, 1) == "w/9/1> ");
  // torchrun 2.15's ${hostname}: the host name, as socket.gethostname() gives it.
  std::array<char, 256> host{};
  REQUIRE(::gethostname(host.data(), host.size() - 1) == 0);
  CHECK(LogRouter::expand_prefix("${hostname}:${rank}: ", "w", 3, 0) ==
        std::string(host.data()) + ":3: ");
  CaptureFile out;
  LogRouterOptions options;
  options.prefix_template = "";
  options.stdout_console = out.console.get();
  LogRouter router(options);
  router.begin_attempt(1, 0, std::nullopt);
  router.write(0, 1, "raw\n");
  router.end_attempt();
  CHECK(out.text() == "raw\n");
}

TEST_CASE("redirected streams go to files only, teed ones to files and the console", "[logs]") {
  CaptureFile out, err;
  auto dir =
      std::filesystem::temp_directory_path() / ("log_router_dir_" + std::to_string(::getpid()));
  LogRouterOptions options;
  options.stdout_console = out.console.get();
  options.stderr_console = err.console.get();
  options.redirects = parse_stream_selection("-r", "0:1");  // rank 0 stdout: file only
  options.tee = parse_stream_selection("-t", "1:3");        // rank 1 both: file + console
  {
    LogRouter router(options);
    router.begin_attempt(2, 0, dir);
    router.write(0, 1, "r0 out\n");
    router.write(0, 2, "r0 err\n");
    router.write(1, 1, "r1 out\n");
    router.write(1, 2, "r1 err\n");
    router.end_attempt();
  }
  CHECK(out.text() == "[default1]:r1 out\n");
  CHECK(err.text() == "[default0]:r0 err\n[default1]:r1 err\n");
  CHECK(read_file(dir / "0" / "stdout.log") == "r0 out\n");
  CHECK_FALSE(std::filesystem::exists(dir / "0" / "stderr.log"));
  CHECK(read_file(dir / "1" / "stdout.log") == "r1 out\n");
  CHECK(read_file(dir / "1" / "stderr.log") == "r1 err\n");
  std::filesystem::remove_all(dir);
}

TEST_CASE("local_ranks_filter limits the console, not the files", "[logs]") {
  CaptureFile out;
  LogRouterOptions options;
  options.stdout_console = out.console.get();
  options.local_ranks_filter = std::vector<int>{1};
  LogRouter router(options);
  router.begin_attempt(3, 0, std::nullopt);
  for (int rank = 0; rank < 3; ++rank) router.write(rank, 1, "x\n");
  router.end_attempt();
  CHECK(out.text() == "[default1]:x\n");
}

TEST_CASE("an endless line is written out in 1 MiB pieces", "[logs]") {
  CaptureFile out;
  LogRouterOptions options;
  options.prefix_template = "";
  options.stdout_console = out.console.get();
  LogRouter router(options);
  router.begin_attempt(1, 0, std::nullopt);
  std::string chunk(64 * 1024, 'x');
  for (int i = 0; i < 20; ++i) router.write(0, 1, chunk);  // 1.25 MiB, no newline
  CHECK(out.text().size() == (1 << 20));                   // shown as it stands, the line left open
  router.end_attempt();
  CHECK(out.text().size() == 20 * chunk.size() + 1);  // continued, then ended
}

TEST_CASE(
    "raw bars: '\\r' redraws keep their prefix, and an unfinished line shows after "
    "kPartialDelay",
    "[logs]") {
  CaptureFile out;
  auto dir =
      std::filesystem::temp_directory_path() / ("log_router_bar_" + std::to_string(::getpid()));
  LogRouterOptions options;
  options.stdout_console = out.console.get();
  options.tee = parse_stream_selection("-t", "3");
  options.progress_bars = ProgressBars::kRaw;
  LogRouter router(options);
  router.begin_attempt(2, 0, dir);
  router.write(0, 1, "\r 10%");  // tqdm: '\r' first, then the bar
  router.write(0, 1, "\r 20%");
  CHECK(out.text() == "[default0]: 10%");  // 20% is not a line yet...
  // The file has the bytes as written, at once.
  CHECK(read_file(dir / "0" / "stdout.log") == "\r 10%\r 20%");
  router.flush_stale(std::chrono::steady_clock::now());  // ...nor stale yet
  CHECK(out.text() == "[default0]: 10%");
  router.flush_stale(std::chrono::steady_clock::now() + kPartialDelay);
  CHECK(out.text() == "[default0]: 10%\r[default0]: 20%");  // redrawn in place
  router.write(1, 1, "other rank\n");                       // never on the bar's line
  router.write(0, 1, "\r100%\r\n");                         // "\r\n" ends a line
  router.write(0, 1, "Epoch 1: ");
  router.flush_stale(std::chrono::steady_clock::now() + kPartialDelay);
  router.write(0, 1, "loss 0.5\n");  // continues the shown part, no second prefix
  router.end_attempt();
  CHECK(out.text() ==
        "[default0]: 10%\r[default0]: 20%\n[default1]:other rank\n[default0]:100%\n"
        "[default0]:Epoch 1: loss 0.5\n");
  std::filesystem::remove_all(dir);
}

TEST_CASE("lines matching a duplicate filter also go, prefixed, to filtered_std*.log", "[logs]") {
  CaptureFile out;
  auto dir = std::filesystem::temp_directory_path() /
             ("log_router_filtered_" + std::to_string(::getpid()));
  LogRouterOptions options;
  options.stdout_console = out.console.get();
  options.stdout_filters = {"apple", "orange"};
  options.stderr_filters = {"loss="};
  options.redirects = parse_stream_selection("-r", "0:1");  // rank 0's stdout leaves the console
  options.local_ranks_filter = std::vector<int>{0};         // and rank 1 is not shown at all
  {
    LogRouter router(options);
    router.begin_attempt(2, 4, dir);
    router.write(0, 1, "an apple\npear\n");
    router.write(1, 1, "orange");  // joined with the next chunk, then matched
    router.write(1, 1, " juice\nplum\n");
    router.write(0, 2, "step 1 loss=0.5\nwarning\n");
    router.write(1, 2, "apple on stderr\n");
    router.write(1, 1, "last apple, no newline");
    router.end_attempt();
  }
  CHECK(read_file(dir / "filtered_stdout.log") ==
        "[default0]:an apple\n[default1]:orange juice\n[default1]:last apple, no newline\n");
  CHECK(read_file(dir / "filtered_stderr.log") == "[default0]:step 1 loss=0.5\n");
  CHECK(out.text().empty());  // the console's own rules are unchanged
  std::filesystem::remove_all(dir);
}

TEST_CASE("without filters no filtered file is made", "[logs]") {
  auto dir = std::filesystem::temp_directory_path() /
             ("log_router_nofilter_" + std::to_string(::getpid()));
  LogRouterOptions options;
  options.stdout_filters = {"x"};
  {
    LogRouter router(options);
    router.begin_attempt(1, 0, dir);
    router.write(0, 2, "x on stderr\n");
    router.end_attempt();
  }
  CHECK(read_file(dir / "filtered_stdout.log").empty());
  CHECK_FALSE(std::filesystem::exists(dir / "filtered_stderr.log"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("identical lines of several ranks print once with their ranks, in order", "[logs]") {
  CaptureFile out;
  auto dir =
      std::filesystem::temp_directory_path() / ("log_router_same_" + std::to_string(::getpid()));
  LogRouterOptions options;
  options.stdout_console = out.console.get();
  options.tee = parse_stream_selection("-t", "3");
  {
    LogRouter router(options);
    router.begin_attempt(3, 0, dir);
    for (int rank : {2, 0, 1}) router.write(rank, 1, "UserWarning: same\n");
    router.write(0, 1, "only rank 0\n");
    router.write(1, 1, "x\n");
    router.write(2, 1, "x\n");
    router.write(1, 1, "done\n");
    router.end_attempt();
  }
  // Rank 0 never printed x: it goes as [default1-2] once rank 0 has ended, after rank 0's
  // line that came before it; "done" last.
  CHECK(out.text() ==
        "[default0-2]:UserWarning: same\n[default0]:only rank 0\n[default1-2]:x\n"
        "[default1]:done\n");
  // The files are each rank's own, complete.
  CHECK(read_file(dir / "0" / "stdout.log") == "UserWarning: same\nonly rank 0\n");
  CHECK(read_file(dir / "1" / "stdout.log") == "UserWarning: same\nx\ndone\n");
  CHECK(read_file(dir / "2" / "stdout.log") == "UserWarning: same\nx\n");
  std::filesystem::remove_all(dir);
}

TEST_CASE("a collapsed line's prefix fits the template, and --log_collapse off keeps every line",
          "[logs]") {
  CHECK(LogRouter::expand_group_prefix("[${role_name}${local_rank}]:", "default", 8,
                                       {0, 1, 2, 3, 5}) == "[default0-3,5]:");
  CHECK(LogRouter::expand_group_prefix("${rank}|${local_rank}> ", "w", 8, {0, 1}) == "8-9|0-1> ");
  CaptureFile out;
  LogRouterOptions options;
  options.stdout_console = out.console.get();
  options.collapse = false;
  LogRouter router(options);
  router.begin_attempt(2, 0, std::nullopt);
  router.write(0, 1, "same\n");
  router.write(1, 1, "same\n");
  router.end_attempt();
  CHECK(out.text() == "[default0]:same\n[default1]:same\n");
}

TEST_CASE("thinned bars: the first state, the newest once its interval ends, and the last",
          "[logs][bars]") {
  CaptureFile out;
  LogRouterOptions options;
  options.stdout_console = out.console.get();
  options.stderr_console = out.console.get();
  options.progress_bars = ProgressBars::kThin;
  options.bar_interval = std::chrono::hours(1);  // no update here is an interval apart
  LogRouter router(options);
  router.begin_attempt(2, 0, std::nullopt);
  for (int step = 0; step <= 100; step += 10) {
    for (int rank : {0, 1}) {
      router.write(rank, 2, "\r" + std::to_string(step) + "%|");
    }
  }
  router.write(0, 1, "a line between\n");
  // An hour later, with no update meanwhile: each bar's newest state, once.
  router.flush_stale(std::chrono::steady_clock::now() + std::chrono::hours(2));
  router.write(0, 2, "\n");  // rank 0's bar ends: its last state was printed just now
  router.write(1, 2, "\r100%| done\n");
  router.end_attempt();
  CHECK(out.text() ==
        "[default0]:0%|\n[default1]:0%|\n[default0]:a line between\n[default0]:100%|\n"
        "[default1]:100%|\n[default1]:100%| done\n");
}

TEST_CASE("live bars go to the console's live area, and their last state scrolls as a line",
          "[logs][bars][live]") {
  CaptureFile out;
  out.console->enable_live_area();
  LogRouterOptions options;
  options.stdout_console = out.console.get();
  options.stderr_console = out.console.get();
  LogRouter router(options);
  router.begin_attempt(2, 0, std::nullopt);
  router.write(0, 2, "\r 10%|#");
  router.write(1, 2, "\r 20%|##");
  router.flush_stale(std::chrono::steady_clock::now() + kPartialDelay);
  CHECK(router.progress(0) == " 10%|#");
  CHECK(router.progress(1) == " 20%|##");
  // Both bars drawn at the bottom, each on its own line, none scrolled.
  const std::vector<std::string> bars = {"[default0]: 10%|#", "[default1]: 20%|##"};
  for (int i = 0; i < 1000 && screen_of(out.text()) != bars; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(screen_of(out.text()) == bars);
  router.write(0, 2, "\r100%|##########\n");
  router.write(1, 1, "a line\n");
  router.end_attempt();
  // Printed above the area as lines: rank 0's last state and the line; rank 1's bar, still
  // unfinished at the end, is printed as it stands; no bar is left below.
  CHECK(screen_of(out.text()) == std::vector<std::string>{"[default0]:100%|##########",
                                                          "[default1]:a line",
                                                          "[default1]: 20%|##"});
  CHECK(router.recent_lines(0).empty());  // end_attempt() forgot the attempt
}
