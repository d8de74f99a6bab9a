// FifoReader: lines from writers that come and go, split and joined correctly, on the loop.
#include "launcher/hang/fifo_reader.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <thread>
#include <vector>

#include "tests/launcher/hang/fifo_test_support.hpp"
#include "tests/support/temp_dir.hpp"

using namespace ddp::launcher;
using ddp::test::run_for;
using ddp::test::run_until;
using ddp::test::TempDir;
using ddp::test::write_fifo;
using namespace std::chrono_literals;

namespace {

struct Fixture {
  Fixture()
      : reader(io, dir.path() / "fifo",
               [this](std::string_view line) { lines.emplace_back(line); }) {
    reader.set_warning_sink([this](const std::string& message) { warnings.push_back(message); });
  }
  bool wait_lines(size_t n) {
    return run_until(
        io, [&] { return lines.size() >= n; }, 10s);
  }

  TempDir dir;
  boost::asio::io_context io;
  std::vector<std::string> lines;
  std::vector<std::string> warnings;
  FifoReader reader;
};

// Writer w's line i: lengths vary, so lines straddle reads.
std::string expected_line(int w, int i) {
  return "writer " + std::to_string(w) + " line " + std::to_string(i) + " " +
         std::string(static_cast<size_t>(i % 97), 'x');
}

}  // namespace

TEST_CASE("FifoReader delivers complete lines, a partial line waits for its newline",
          "[fifo_reader]") {
  Fixture f;
  CHECK(std::filesystem::is_fifo(f.reader.path()));
  CHECK(f.reader.path() == f.dir.path() / "fifo");
  REQUIRE(write_fifo(f.reader.path(), "alpha\nbe"));
  REQUIRE(f.wait_lines(1));
  run_for(f.io, 50ms);
  CHECK(f.lines == std::vector<std::string>{"alpha"});
  REQUIRE(write_fifo(f.reader.path(), "ta\n\ngamma\n"));
  REQUIRE(f.wait_lines(4));
  CHECK(f.lines == std::vector<std::string>{"alpha", "beta", "", "gamma"});
  CHECK(f.reader.lines() == 4);
  CHECK(f.warnings.empty());
}

TEST_CASE("FifoReader keeps reading while writers come and go", "[fifo_reader]") {
  Fixture f;
  // Each writer opens, writes one line and closes: the last one leaving is no end-of-file.
  for (int i = 0; i < 50; ++i) {
    REQUIRE(write_fifo(f.reader.path(), "line " + std::to_string(i) + "\n"));
    if (i % 10 == 0) REQUIRE(f.wait_lines(static_cast<size_t>(i) + 1));
  }
  REQUIRE(f.wait_lines(50));
  for (int i = 0; i < 50; ++i)
    CHECK(f.lines[static_cast<size_t>(i)] == "line " + std::to_string(i));
  // A gap with no writer at all, then another one.
  run_for(f.io, 100ms);
  REQUIRE(write_fifo(f.reader.path(), "late\n"));
  REQUIRE(f.wait_lines(51));
  CHECK(f.lines.back() == "late");
}

TEST_CASE("FifoReader takes lines from many concurrent writers whole and in each one's order",
          "[fifo_reader]") {
  Fixture f;
  constexpr int kWriters = 8;
  constexpr int kLinesEach = 300;
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&f, w] {
      // Blocking writes: the reader runs on the test thread meanwhile.
      int fd = ::open(f.reader.path().c_str(), O_WRONLY | O_CLOEXEC);
      for (int i = 0; i < kLinesEach; ++i) {
        std::string line = expected_line(w, i) + "\n";
        ssize_t ignored = ::write(fd, line.data(), line.size());
        (void)ignored;
      }
      ::close(fd);
    });
  }
  bool all = f.wait_lines(size_t{kWriters} * kLinesEach);
  for (auto& writer : writers) writer.join();
  REQUIRE(all);
  std::map<int, int> next;  // writer -> the line number expected next
  for (const auto& line : f.lines) {
    int w = -1;
    int i = -1;
    REQUIRE(std::sscanf(line.c_str(), "writer %d line %d", &w, &i) == 2);
    CHECK(i == next[w]);
    next[w] = i + 1;
    CHECK(line == expected_line(w, i));
  }
  for (int w = 0; w < kWriters; ++w) CHECK(next[w] == kLinesEach);
}

TEST_CASE("FifoReader drops a line longer than 64 KiB, counts it and reads on", "[fifo_reader]") {
  Fixture f;
  std::string longest(kMaxFifoLineBytes, 'a');
  std::string too_long(kMaxFifoLineBytes + 1, 'b');
  std::thread writer([&] {
    int fd = ::open(f.reader.path().c_str(), O_WRONLY | O_CLOEXEC);
    std::string bytes =
        "before\n" + too_long + "\n" + longest + "\n" + std::string(200000, 'c') + "\nafter\n";
    size_t done = 0;
    while (done < bytes.size()) {
      // Pieces of odd sizes, so lines straddle the reads.
      ssize_t n = ::write(fd, bytes.data() + done, std::min<size_t>(7919, bytes.size() - done));
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::close(fd);
  });
  bool got = f.wait_lines(3);
  writer.join();
  REQUIRE(got);
  run_for(f.io, 50ms);
  REQUIRE(f.lines.size() == 3);
  CHECK(f.lines[0] == "before");
  CHECK(f.lines[1] == longest);
  CHECK(f.lines[2] == "after");
  CHECK(f.reader.dropped_lines() == 2);
  REQUIRE(f.warnings.size() == 1);  // one warning per 100 drops
  CHECK_THAT(f.warnings[0], Catch::Contains("dropped a line longer than 65536 bytes") &&
                                Catch::Contains(f.reader.path().string()));
}

TEST_CASE("FifoReader refuses a path that holds a regular file, and leaves the file alone",
          "[fifo_reader]") {
  TempDir dir;
  std::string path = dir.write("not_a_fifo", "precious\n");
  boost::asio::io_context io;
  try {
    FifoReader reader(io, path, [](std::string_view) {});
    FAIL("a regular file was taken for a FIFO");
  } catch (const std::runtime_error& e) {
    CHECK_THAT(e.what(), Catch::Contains(path) && Catch::Contains("not a FIFO") &&
                             Catch::Contains("expected a named pipe"));
  }
  std::ifstream in(path);
  std::string content;
  std::getline(in, content);
  CHECK(content == "precious");
}

TEST_CASE("FifoReader names the path when the FIFO cannot be created", "[fifo_reader]") {
  TempDir dir;
  boost::asio::io_context io;
  auto path = dir.path() / "no_such_dir" / "fifo";
  CHECK_THROWS_WITH(FifoReader(io, path, [](std::string_view) {}),
                    Catch::Contains(path.string()) && Catch::Contains("mkfifo"));
}

TEST_CASE("FifoReader removes the FIFO it made, and only that one", "[fifo_reader]") {
  TempDir dir;
  boost::asio::io_context io;
  auto made = dir.path() / "made";
  {
    FifoReader reader(io, made, [](std::string_view) {});
    CHECK(std::filesystem::is_fifo(made));
  }
  CHECK_FALSE(std::filesystem::exists(made));

  auto existing = dir.path() / "existing";
  REQUIRE(::mkfifo(existing.c_str(), 0600) == 0);
  std::vector<std::string> lines;
  {
    FifoReader reader(io, existing, [&](std::string_view line) { lines.emplace_back(line); });
    REQUIRE(write_fifo(existing, "reused\n"));
    REQUIRE(run_until(
        io, [&] { return !lines.empty(); }, 10s));
    CHECK(lines[0] == "reused");
  }
  CHECK(std::filesystem::is_fifo(existing));
}

TEST_CASE("FifoReader::close stops reading, writers then find no reader", "[fifo_reader]") {
  Fixture f;
  REQUIRE(write_fifo(f.reader.path(), "one\n"));
  REQUIRE(f.wait_lines(1));
  f.reader.close();
  f.reader.close();  // idempotent
  CHECK_FALSE(f.reader.is_open());
  int fd = ::open(f.reader.path().c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  int err = errno;
  if (fd >= 0) ::close(fd);
  CHECK(fd < 0);
  CHECK(err == ENXIO);
  run_for(f.io, 50ms);
  CHECK(f.lines.size() == 1);
}

TEST_CASE("FifoReader's line handler may close the reader: no line follows", "[fifo_reader]") {
  TempDir dir;
  boost::asio::io_context io;
  std::vector<std::string> lines;
  std::unique_ptr<FifoReader> reader;
  reader = std::make_unique<FifoReader>(io, dir.path() / "fifo", [&](std::string_view line) {
    lines.emplace_back(line);
    reader->close();
  });
  REQUIRE(write_fifo(reader->path(), "first\nsecond\nthird\n"));
  REQUIRE(run_until(
      io, [&] { return !lines.empty(); }, 10s));
  run_for(io, 50ms);
  CHECK(lines == std::vector<std::string>{"first"});
  reader.reset();
  run_for(io, 20ms);  // the aborted read completes without touching the reader
  CHECK_FALSE(std::filesystem::exists(dir.path() / "fifo"));
}
