// The logger: level filtering, DDPLAUNCH_LOG_LEVEL (a bad value included), the program name
// as the prefix, injected sinks, and whole lines from many threads at once.
#include "common/log.hpp"

#include <catch2/catch.hpp>
#include <cerrno>  // program_invocation_short_name
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/stderr_capture.hpp"

using Catch::Matchers::Contains;
using ddp::log::Level;

namespace {

// Keeps every line a test logs, and puts the level and program name back afterwards.
class Captured {
 public:
  Captured() : sink_([this](Level level, std::string_view line) { add(level, line); }) {}
  ~Captured() {
    ddp::log::set_level(level_);
    ddp::log::set_program(program_);
  }
  Captured(const Captured&) = delete;
  Captured& operator=(const Captured&) = delete;

  [[nodiscard]] std::vector<std::string> lines() const {
    std::lock_guard lock(mutex_);
    return lines_;
  }
  [[nodiscard]] std::vector<Level> levels() const {
    std::lock_guard lock(mutex_);
    return levels_;
  }

 private:
  void add(Level level, std::string_view line) {
    std::lock_guard lock(mutex_);
    lines_.emplace_back(line);
    levels_.push_back(level);
  }

  Level level_ = ddp::log::level();
  std::string program_ = ddp::log::program();
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
  std::vector<Level> levels_;
  ddp::log::ScopedSink sink_;  // last: removed before the vectors go
};

// Sets (or unsets, for nullptr) an environment variable for a scope.
class EnvVar {
 public:
  EnvVar(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~EnvVar() {
    if (saved_) {
      ::setenv(name_, saved_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  EnvVar(const EnvVar&) = delete;
  EnvVar& operator=(const EnvVar&) = delete;

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

}  // namespace

TEST_CASE("a level writes its own lines and the more severe ones", "[log]") {
  Captured log;
  ddp::log::set_program("prog");
  ddp::log::set_level(Level::kWarn);
  CHECK(ddp::log::enabled(Level::kError));
  CHECK(ddp::log::enabled(Level::kWarn));
  CHECK_FALSE(ddp::log::enabled(Level::kInfo));
  CHECK_FALSE(ddp::log::enabled(Level::kDebug));
  DDP_LOG_ERROR("e");
  DDP_LOG_WARN("w");
  DDP_LOG_INFO("i");
  DDP_LOG_DEBUG("d");
  ddp::log::write(Level::kInfo, "written directly, still filtered");
  CHECK(log.lines() == std::vector<std::string>{"prog: e\n", "prog: w\n"});
  CHECK(log.levels() == std::vector<Level>{Level::kError, Level::kWarn});

  ddp::log::set_level(Level::kDebug);
  DDP_LOG_DEBUG("d");
  CHECK(log.lines().back() == "prog: d\n");
  CHECK(log.levels().back() == Level::kDebug);
}

TEST_CASE("a line of a level that is off is never formatted", "[log]") {
  Captured log;
  ddp::log::set_level(Level::kInfo);
  int built = 0;
  const auto text = [&] {
    ++built;
    return std::string("costly");
  };
  DDP_LOG_DEBUG(text());
  CHECK(built == 0);
  DDP_LOG_INFO(text());
  CHECK(built == 1);
  CHECK(log.lines().size() == 1);
}

TEST_CASE("level names: the four levels in any case, warning for warn, nothing else", "[log]") {
  CHECK(ddp::log::parse_level("error") == Level::kError);
  CHECK(ddp::log::parse_level("warn") == Level::kWarn);
  CHECK(ddp::log::parse_level("WARNING") == Level::kWarn);
  CHECK(ddp::log::parse_level("Info") == Level::kInfo);
  CHECK(ddp::log::parse_level("debug") == Level::kDebug);
  CHECK_FALSE(ddp::log::parse_level("").has_value());
  CHECK_FALSE(ddp::log::parse_level("trace").has_value());
  CHECK_FALSE(ddp::log::parse_level("3").has_value());
  for (Level level : {Level::kError, Level::kWarn, Level::kInfo, Level::kDebug}) {
    CHECK(ddp::log::parse_level(ddp::log::level_name(level)) == level);
  }
}

TEST_CASE("DDPLAUNCH_LOG_LEVEL: unset or empty is info, a bad value is info and a warning",
          "[log]") {
  CHECK(ddp::log::choose_level(nullptr).level == Level::kInfo);
  CHECK(ddp::log::choose_level(nullptr).warning.empty());
  CHECK(ddp::log::choose_level("").level == Level::kInfo);
  CHECK(ddp::log::choose_level("debug").level == Level::kDebug);
  CHECK(ddp::log::choose_level("debug").warning.empty());
  const auto bad = ddp::log::choose_level("loud");
  CHECK(bad.level == Level::kInfo);
  CHECK(bad.warning ==
        "DDPLAUNCH_LOG_LEVEL='loud' is not a log level (expected error, warn, info or debug); "
        "using info");
}

TEST_CASE("init() names the program and takes the level from the environment", "[log]") {
  Captured log;
  SECTION("a good value") {
    const EnvVar env("DDPLAUNCH_LOG_LEVEL", "error");
    ddp::log::init("ddpstore");
    CHECK(ddp::log::level() == Level::kError);
    CHECK(ddp::log::program() == "ddpstore");
    CHECK(log.lines().empty());
  }
  SECTION("unset") {
    const EnvVar env("DDPLAUNCH_LOG_LEVEL", nullptr);
    ddp::log::set_level(Level::kDebug);
    ddp::log::init("train");
    CHECK(ddp::log::level() == Level::kInfo);
    CHECK(log.lines().empty());
  }
  SECTION("a bad value: one warning naming it, then info") {
    const EnvVar env("DDPLAUNCH_LOG_LEVEL", "verbose");
    ddp::log::set_level(Level::kError);
    ddp::log::init("ddplaunch");
    CHECK(ddp::log::level() == Level::kInfo);
    REQUIRE(log.lines().size() == 1);
    CHECK(log.lines()[0] ==
          "ddplaunch: DDPLAUNCH_LOG_LEVEL='verbose' is not a log level (expected error, warn, "
          "info or debug); using info\n");
    CHECK(log.levels()[0] == Level::kWarn);
  }
}

TEST_CASE("the program name begins every line, the executable's until main sets one", "[log]") {
  Captured log;
  ddp::log::set_program(program_invocation_short_name);
  DDP_LOG_INFO("one");
  ddp::log::set_program("ddplaunch");
  DDP_LOG_WARN("rendezvous failed: x");
  CHECK(log.lines() ==
        std::vector<std::string>{std::string(program_invocation_short_name) + ": one\n",
                                 "ddplaunch: rendezvous failed: x\n"});
}

TEST_CASE("sinks: a scoped sink takes the lines, the previous one gets them back", "[log]") {
  Captured outer;
  ddp::log::set_level(Level::kInfo);
  {
    std::vector<std::string> inner;
    const ddp::log::ScopedSink sink(
        [&](Level, std::string_view line) { inner.emplace_back(line); });
    DDP_LOG_INFO("to the inner sink");
    CHECK(inner.size() == 1);
    CHECK(outer.lines().empty());
  }
  DDP_LOG_INFO("to the outer sink");
  CHECK(outer.lines().size() == 1);
}

TEST_CASE("without a sink, lines go to stderr", "[log]") {
  const Captured restore;
  ddp::log::set_level(Level::kInfo);
  ddp::log::set_program("prog");
  const auto previous = ddp::log::set_sink(nullptr);
  ddp::test::StderrCapture err;
  DDP_LOG_INFO("on stderr");
  const auto lines = err.lines();
  ddp::log::set_sink(previous);
  CHECK(lines == std::vector<std::string>{"prog: on stderr"});
}

TEST_CASE("many threads logging at once: every line arrives whole", "[log]") {
  const Captured restore;
  ddp::log::set_level(Level::kInfo);
  ddp::log::set_program("prog");
  const auto previous = ddp::log::set_sink(nullptr);  // the real one: write(2) to stderr
  constexpr int kThreads = 8;
  constexpr int kLines = 100;
  // Long enough (up to ~5 KiB) that one unguarded line could be split by another's.
  const auto body = [](int t, int i) {
    return "t" + std::to_string(t) + " i" + std::to_string(i) + " " +
           std::string(static_cast<size_t>(100 + 53 * i), static_cast<char>('a' + t));
  };
  std::vector<std::string> lines;
  {
    ddp::test::StderrCapture err;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kLines; ++i) DDP_LOG_INFO(body(t, i));
      });
    }
    for (auto& thread : threads) thread.join();
    lines = err.lines();
  }
  ddp::log::set_sink(previous);
  REQUIRE(lines.size() == size_t{kThreads} * kLines);
  std::vector<int> next(kThreads, 0);  // each thread's lines arrive in its order
  for (const auto& line : lines) {
    REQUIRE(line.rfind("prog: t", 0) == 0);
    const int t = std::stoi(line.substr(7));
    REQUIRE(t >= 0);
    REQUIRE(t < kThreads);
    REQUIRE(line == "prog: " + body(t, next[static_cast<size_t>(t)]));
    ++next[static_cast<size_t>(t)];
  }
}
