#include "common/log.hpp"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <mutex>

#include "common/env_names.hpp"

namespace ddp::log {
namespace detail {
std::atomic<int> current_level{static_cast<int>(Level::kInfo)};
}  // namespace detail

namespace {

// The program name and the sink change rarely (main, a test's scope) and are read for every
// line: one mutex guards both and serializes the sink calls, so lines never interleave.
struct Shared {
  std::mutex mutex;
  std::string program = program_invocation_short_name;
  Sink sink;
};

Shared& shared() {
  static Shared instance;
  return instance;
}

// The default sink: the whole line in one write(2) (a pipe keeps lines up to PIPE_BUF whole
// even against other processes), resumed after a signal or a short write.
void write_stderr(std::string_view line) {
  while (!line.empty()) {
    const ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nobody reads stderr: nothing better to do with a log line
    line.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

Level level() {
  return static_cast<Level>(detail::current_level.load(std::memory_order_relaxed));
}

void set_level(Level level) {
  detail::current_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

std::optional<Level> parse_level(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "error") return Level::kError;
  if (lower == "warn" || lower == "warning") return Level::kWarn;
  if (lower == "info") return Level::kInfo;
  if (lower == "debug") return Level::kDebug;
  return std::nullopt;
}

const char* level_name(Level level) {
  switch (level) {
    case Level::kError:
      return "error";
    case Level::kWarn:
      return "warn";
    case Level::kInfo:
      return "info";
    case Level::kDebug:
      return "debug";
  }
  return "info";
}

LevelChoice choose_level(const char* value) {
  LevelChoice choice;
  if (value == nullptr || *value == '\0') return choice;
  if (auto parsed = parse_level(value)) {
    choice.level = *parsed;
  } else {
    choice.warning = std::string(env::kLogLevel) + "='" + value +
                     "' is not a log level (expected error, warn, info or debug); using info";
  }
  return choice;
}

void init(std::string program) {
  set_program(std::move(program));
  const auto choice = choose_level(std::getenv(env::kLogLevel));
  set_level(choice.level);
  if (!choice.warning.empty()) DDP_LOG_WARN(choice.warning);
}

void set_program(std::string program) {
  auto& s = shared();
  std::lock_guard lock(s.mutex);
  s.program = std::move(program);
}

std::string program() {
  auto& s = shared();
  std::lock_guard lock(s.mutex);
  return s.program;
}

Sink set_sink(Sink sink) {
  auto& s = shared();
  std::lock_guard lock(s.mutex);
  std::swap(s.sink, sink);
  return sink;
}

void write(Level level, std::string_view text) {
  if (!enabled(level)) return;
  auto& s = shared();
  std::lock_guard lock(s.mutex);
  std::string line;
  line.reserve(s.program.size() + text.size() + 3);
  line.append(s.program).append(": ").append(text).push_back('\n');
  if (s.sink) {
    s.sink(level, line);
  } else {
    write_stderr(line);
  }
}

}  // namespace ddp::log
