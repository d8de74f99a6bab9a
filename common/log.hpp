#pragma once
// The one logger of every program and library here: lines "<program>: <text>\n", filtered by
// level, each handed whole to one sink call (by default one write(2) to stderr).
//
//   int main(int argc, char** argv) { ddp::log::init("ddpstore"); ... }
//   DDP_LOG_INFO("serving on " + address);          // the text is built only when info is on
//   if (ddp::log::enabled(ddp::log::Level::kDebug)) { ...costly diagnostics... }
//
// The level comes from DDPLAUNCH_LOG_LEVEL (error, warn, info or debug; default info), read by
// init(); a bad value is one warning line naming it, then info. Levels only select lines, they
// do not decorate them: a line reads the same at every level ("ddplaunch: rendezvous
// failed: ..."), and a fatal error says "error: " in its text where it always did.
// The ddplaunch agent points the sink at its non-blocking console, so no thread (the loop, a
// rendezvous watcher, the store server) ever blocks on a stalled stderr; tests point it at a
// capture. Sinks are called one at a time (under a mutex): a sink must not log itself.
#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace ddp::log {

// Most severe first: a level writes its own lines and those above it.
enum class Level { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

namespace detail {
extern std::atomic<int> current_level;
}  // namespace detail

// True when a line of this level is written now; test it before costly formatting.
inline bool enabled(Level level) {
  return static_cast<int>(level) <= detail::current_level.load(std::memory_order_relaxed);
}
[[nodiscard]] Level level();
void set_level(Level level);

// "error", "warn" (or "warning"), "info", "debug", in any case -> the level; else nullopt.
[[nodiscard]] std::optional<Level> parse_level(std::string_view text);
// "error", "warn", "info", "debug".
[[nodiscard]] const char* level_name(Level level);

// What a DDPLAUNCH_LOG_LEVEL value selects: unset (null) or empty is info; a bad value is info
// with a warning to print ("DDPLAUNCH_LOG_LEVEL='loud' is not a log level (...); using info").
struct LevelChoice {
  Level level = Level::kInfo;
  std::string warning;  // empty unless the value was bad
};
[[nodiscard]] LevelChoice choose_level(const char* value);

// Once per main, before any thread starts: set_program(program), then the level from
// DDPLAUNCH_LOG_LEVEL (a bad value logs its warning once and leaves info).
void init(std::string program);
// The first word of every line; program_invocation_short_name until set.
void set_program(std::string program);
[[nodiscard]] std::string program();

// Receives each line whole: "<program>: <text>\n".
using Sink = std::function<void(Level, std::string_view line)>;
// Sends lines to sink from now on (empty: the default, stderr); returns the sink it replaces.
Sink set_sink(Sink sink);

// Installs a sink for a scope and puts the previous one back at its end.
class ScopedSink {
 public:
  explicit ScopedSink(Sink sink) : previous_(set_sink(std::move(sink))) {}
  ~ScopedSink() { set_sink(std::move(previous_)); }
  ScopedSink(const ScopedSink&) = delete;
  ScopedSink& operator=(const ScopedSink&) = delete;

 private:
  Sink previous_;
};

// Writes "<program>: <text>\n" to the sink when level is enabled. text is one line.
void write(Level level, std::string_view text);

}  // namespace ddp::log

// The call sites' form: text (any expression a std::string_view takes) is evaluated only
// when the level is on, so a disabled line costs one relaxed atomic load.
#define DDP_LOG(level, text)                                          \
  do {                                                                \
    if (::ddp::log::enabled(level)) ::ddp::log::write(level, (text)); \
  } while (false)
#define DDP_LOG_ERROR(text) DDP_LOG(::ddp::log::Level::kError, text)
#define DDP_LOG_WARN(text) DDP_LOG(::ddp::log::Level::kWarn, text)
#define DDP_LOG_INFO(text) DDP_LOG(::ddp::log::Level::kInfo, text)
#define DDP_LOG_DEBUG(text) DDP_LOG(::ddp::log::Level::kDebug, text)
