// The console writer: never blocks its caller, drops whole lines (counted) when nobody reads,
// says so once the reader catches up, and gives up on a stuck reader at close.
#include "launcher/output/console.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <regex>
#include <sstream>
#include <thread>

using namespace ddp::launcher;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

// A pipe whose read end the test controls; closed on scope exit.
struct Pipe {
  Pipe() { REQUIRE(::pipe2(fds, O_CLOEXEC) == 0); }
  ~Pipe() {
    close_read();
    close_write();
  }
  void close_read() {
    if (fds[0] >= 0) ::close(fds[0]);
    fds[0] = -1;
  }
  void close_write() {
    if (fds[1] >= 0) ::close(fds[1]);
    fds[1] = -1;
  }
  // Fills the pipe to the brim, so the next write(2) to it blocks.
  void fill() const {
    int flags = ::fcntl(fds[1], F_GETFL);
    ::fcntl(fds[1], F_SETFL, flags | O_NONBLOCK);
    std::string block(4096, 'f');
    while (::write(fds[1], block.data(), block.size()) > 0) {
    }
    ::fcntl(fds[1], F_SETFL, flags);
  }
  // Everything until EOF (all write ends closed).
  std::string read_all() const {
    std::string text;
    char buffer[65536];
    for (;;) {
      ssize_t n = ::read(fds[0], buffer, sizeof(buffer));
      if (n <= 0) return text;
      text.append(buffer, static_cast<size_t>(n));
    }
  }
  int fds[2] = {-1, -1};
};

std::string numbered_line(int i) {
  std::string line = "line " + std::to_string(i) + " ";
  line.resize(99, 'x');
  return line + "\n";
}

// Writes n numbered lines from another thread; true when that finished within 20 s (a
// console that blocks its caller hangs here instead).
bool write_lines(Console& console, int n) {
  auto done = std::async(std::launch::async, [&] {
    for (int i = 0; i < n; ++i) console.write(numbered_line(i));
  });
  return done.wait_for(20s) == std::future_status::ready;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("a console that keeps up gets every line, in order", "[console]") {
  Pipe pipe;
  std::future<std::string> reader = std::async(std::launch::async, [&] { return pipe.read_all(); });
  {
    Console console(pipe.fds[1]);
    REQUIRE(write_lines(console, 20000));
    CHECK(console.close().empty());
    CHECK(console.dropped().lines == 0);
  }
  pipe.close_write();
  auto lines = lines_of(reader.get());
  REQUIRE(lines.size() == 20000);
  for (int i = 0; i < 20000; ++i) CHECK(lines[static_cast<size_t>(i)] + "\n" == numbered_line(i));
}

TEST_CASE("a reader that pauses but keeps reading loses nothing past the queue's bound",
          "[console]") {
  // 100 KB against a 16 KiB bound and a 64 KiB pipe: the queue grows past its bound while
  // the reader pauses (by 36 KB or more, however much the writer moved into the pipe), but
  // write(2) never stalls for the whole stall time, so nothing drops: the burst stays under
  // the hard limit (8 x 16 KiB) even if the writer thread has not run yet.
  Pipe pipe;
  std::future<std::string> reader = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(200ms);
    return pipe.read_all();
  });
  {
    Console console(pipe.fds[1], "", 16 * 1024, 5s);
    REQUIRE(write_lines(console, 1000));
    CHECK(console.close(10s, 20s).empty());  // generous: a loaded machine may starve the reader
    CHECK(console.dropped().lines == 0);
  }
  pipe.close_write();
  auto lines = lines_of(reader.get());
  REQUIRE(lines.size() == 1000);
  for (int i = 0; i < 1000; ++i) CHECK(lines[static_cast<size_t>(i)] + "\n" == numbered_line(i));
}

TEST_CASE("nobody reading: writes return, whole lines are dropped and counted", "[console]") {
  Pipe pipe;
  constexpr int kLines = 3000;  // 300 KB: more than the pipe (64 KiB) and the queue hold
  Console console(pipe.fds[1], "the files keep everything", 16 * 1024);
  REQUIRE(write_lines(console, kLines));
  auto dropped = console.dropped();
  CHECK(dropped.lines > 0);
  CHECK(dropped.bytes == dropped.lines * 100);

  // The reader catches up: what was queued comes out, and a notice after each gap.
  std::future<std::string> reader = std::async(std::launch::async, [&] { return pipe.read_all(); });
  CHECK(console.close().empty());
  pipe.close_write();
  auto lines = lines_of(reader.get());
  REQUIRE_FALSE(lines.empty());
  CHECK_THAT(lines.back(), Contains("console blocked"));  // the last lines were dropped
  std::regex notice(R"(ddplaunch: console blocked: dropped (\d+) lines \((\d+) bytes\) of output; )"
                    R"(the files keep everything)");
  uint64_t noticed = 0;
  int next = 0;  // delivered lines keep their order, whole
  int delivered = 0;
  for (const auto& line : lines) {
    std::smatch m;
    if (std::regex_match(line, m, notice)) {
      noticed += std::stoull(m[1]);
      CHECK(std::stoull(m[2]) == std::stoull(m[1]) * 100);
      continue;
    }
    auto number = std::stoi(line.substr(5));
    CHECK(number >= next);
    CHECK(line + "\n" == numbered_line(number));
    next = number + 1;
    ++delivered;
  }
  CHECK(noticed == dropped.lines);
  CHECK(delivered + dropped.lines == kLines);
}

TEST_CASE("lines after a drained overflow follow the notice", "[console]") {
  Pipe pipe;
  Console console(pipe.fds[1], "", 8 * 1024);
  REQUIRE(write_lines(console, 2000));
  std::future<std::string> reader = std::async(std::launch::async, [&] { return pipe.read_all(); });
  REQUIRE(console.drain(10s, 10s));
  console.write("after\n");
  console.close();
  pipe.close_write();
  auto lines = lines_of(reader.get());
  REQUIRE(lines.size() >= 2);
  CHECK(lines.back() == "after");
  CHECK_THAT(lines[lines.size() - 2], Contains("console blocked: dropped"));
}

TEST_CASE("close gives up on a reader that stopped and hands back the notice", "[console]") {
  Pipe pipe;
  pipe.fill();
  Console console(pipe.fds[1], "", 8 * 1024);
  REQUIRE(write_lines(console, 2000));
  auto start = std::chrono::steady_clock::now();
  std::string notice = console.close(200ms, 10s);
  CHECK(std::chrono::steady_clock::now() - start < 8s);  // the stall limit, not the 10 s
  CHECK_THAT(notice, Contains("console blocked: dropped"));
  // Everything not written is counted, the queue's last lines included.
  CHECK(console.dropped().lines >= 2000 - 4096 / 100);  // all but the batch in write(2)
  console.write("late\n");                              // after close: dropped, no hang
  CHECK(console.close().empty());
}

TEST_CASE("a console nobody will ever read (EPIPE) drops lines without a notice", "[console]") {
  Pipe pipe;
  pipe.close_read();
  Console console(pipe.fds[1], "", 8 * 1024);
  REQUIRE(write_lines(console, 1000));
  CHECK(console.close().empty());
  CHECK(console.dropped().lines == 1000);
}

TEST_CASE("a text longer than the whole queue is dropped with a notice at once", "[console]") {
  Pipe pipe;
  std::future<std::string> reader = std::async(std::launch::async, [&] { return pipe.read_all(); });
  {
    Console console(pipe.fds[1], "", 1024);
    console.write(std::string(4096, 'y') + "\n");
    console.write("small\n");
    console.close();
  }
  pipe.close_write();
  auto lines = lines_of(reader.get());
  REQUIRE(lines.size() == 2);
  CHECK_THAT(lines[0], Contains("dropped 1 lines (4097 bytes)"));
  CHECK(lines[1] == "small");
}

TEST_CASE(
    "stdout and stderr on one destination share a console, a stuck stdout's notice goes "
    "to stderr",
    "[console]") {
  Pipe shared;
  int copy = ::dup(shared.fds[1]);
  {
    Consoles consoles(shared.fds[1], copy, "");
    CHECK(&consoles.out() == &consoles.err());
  }
  ::close(copy);

  Pipe out;
  Pipe err;
  std::future<std::string> err_reader =
      std::async(std::launch::async, [&] { return err.read_all(); });
  {
    out.fill();  // nobody reads stdout
    Consoles consoles(out.fds[1], err.fds[1], "hint");
    CHECK(&consoles.out() != &consoles.err());
    auto done = std::async(std::launch::async, [&] {
      std::string line(999, 'o');
      line += "\n";
      for (int i = 0; i < 3000; ++i) consoles.out().write(line);  // 3 MB > the 2 MiB queue
    });
    REQUIRE(done.wait_for(20s) == std::future_status::ready);
    consoles.err().write("err line\n");
    auto start = std::chrono::steady_clock::now();
    consoles.close();
    CHECK(std::chrono::steady_clock::now() - start < 15s);
  }
  err.close_write();
  auto err_lines = lines_of(err_reader.get());
  REQUIRE(err_lines.size() == 2);
  CHECK(err_lines[0] == "err line");
  CHECK_THAT(err_lines[1], Contains("console blocked: dropped") && Contains("; hint"));
}

TEST_CASE("segments of two sources never share a line, and a bar is redrawn with its prefix",
          "[console]") {
  Pipe pipe;
  std::future<std::string> reader = std::async(std::launch::async, [&] { return pipe.read_all(); });
  {
    Console console(pipe.fds[1]);
    console.write_segment(0, "[a]:", "", SegmentEnd::kCarriage);  // tqdm's leading '\r'
    console.write_segment(0, "[a]:", "10%", SegmentEnd::kCarriage);
    console.write_segment(0, "[a]:", "20%", SegmentEnd::kCarriage);
    console.write_segment(1, "[b]:", "hello", SegmentEnd::kNewline);  // below the bar
    console.write_segment(0, "[a]:", "30%", SegmentEnd::kOpen);
    console.write_segment(0, "[a]:", " done", SegmentEnd::kNewline);  // continues, no prefix
    console.write("agent\n");
    console.write_segment(0, "[a]:", "part", SegmentEnd::kOpen);
    console.write("notice\n");  // ends the open line first
    console.write_segment(0, "[a]:", "last", SegmentEnd::kOpen);
    console.close();  // and the last open line
  }
  pipe.close_write();
  CHECK(reader.get() ==
        "[a]:10%\r[a]:20%\n[b]:hello\n[a]:30% done\nagent\n[a]:part\nnotice\n[a]:last\n");
}

TEST_CASE("a blocking console never drops: it says it is congested, then that it has room",
          "[console]") {
  Pipe pipe;
  pipe.fill();  // the reader is stopped
  std::atomic<int> room_calls{0};
  Console console(pipe.fds[1], "", 8 * 1024, 100ms, SlowConsole::kBlock);
  console.set_room_listener([&] { ++room_calls; });
  REQUIRE(write_lines(console, 200));  // 20 KB, past the 8 KB bound: write() still returns
  CHECK(console.congested());
  std::this_thread::sleep_for(300ms);  // longer than the stall: kDrop would drop now
  CHECK(console.dropped().lines == 0);
  CHECK(room_calls == 0);
  std::future<std::string> reader = std::async(std::launch::async, [&] { return pipe.read_all(); });
  REQUIRE(console.drain(10s, 20s));
  CHECK_FALSE(console.congested());
  CHECK(room_calls >= 1);
  console.close();
  pipe.close_write();
  std::string text = reader.get();
  text.erase(0, text.find("line 0 "));  // what fill() put there
  auto lines = lines_of(text);
  REQUIRE(lines.size() == 200);
  for (int i = 0; i < 200; ++i) CHECK(lines[static_cast<size_t>(i)] + "\n" == numbered_line(i));
  CHECK(console.dropped().lines == 0);
}

TEST_CASE("collapsed lines keep their order with everything else written to the console",
          "[console][collapse]") {
  Pipe pipe;
  Console console(pipe.fds[1]);
  console.begin_collapse(1h, {{true, true}, {true, true}}, [](const std::vector<int>& ranks) {
    std::string prefix = "[";
    for (int rank : ranks) prefix += std::to_string(rank);
    return prefix + "]";
  });
  console.write_line(0, 1, "[0]", "both");
  console.write_line(1, 1, "[1]", "both");  // complete: out at once, as one line
  console.write_line(0, 1, "[0]", "held");
  console.write("agent line\n");            // lets the held line out first
  console.write_line(1, 1, "[1]", "held");  // its group is gone: a line of its own
  console.write_line(0, 2, "[0]", "err");
  console.end_collapse();                  // lets everything out
  console.write_line(1, 2, "[1]", "err");  // collapsing ended: at once, with its own prefix
  console.close();
  pipe.close_write();
  CHECK(pipe.read_all() == "[01]both\n[0]held\nagent line\n[1]held\n[0]err\n[1]err\n");
}

TEST_CASE("a console with a live area writes lines above it and redraws it below",
          "[console][live]") {
  Pipe pipe;
  Console console(pipe.fds[1]);
  console.enable_live_area();
  REQUIRE(console.live_area());
  console.write("a line\n");
  console.set_live(0, "[r0] 10%");
  // The line, with the bar drawn below it (in one write or two).
  std::string text;
  char buffer[4096];
  while (text.find("10%\r\n") == std::string::npos) {
    const ssize_t n = ::read(pipe.fds[0], buffer, sizeof(buffer));
    REQUIRE(n > 0);
    text.append(buffer, static_cast<size_t>(n));
  }
  CHECK(text == "a line\n[r0] 10%\r\n");
  console.clear_live(0);
  console.write("the end\n");
  console.close();
  pipe.close_write();
  // Then: up one row, erase the bar, the next line, and nothing drawn below it.
  CHECK(pipe.read_all() == "\r\x1b[1A\x1b[Jthe end\n");
}
