// Log routing: whole prefixed lines, partial lines joined and flushed, -r/-t files, filters.
#include "launcher/output/log_router.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

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

TEST_CASE("'\\r' redraws keep their prefix, and an unfinished line shows after kPartialDelay",
          "[logs]") {
  CaptureFile out;
  auto dir =
      std::filesystem::temp_directory_path() / ("log_router_bar_" + std::to_string(::getpid()));
  LogRouterOptions options;
  options.stdout_console = out.console.get();
  options.tee = parse_stream_selection("-t", "3");
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
