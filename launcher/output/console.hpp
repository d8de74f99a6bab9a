#pragma once
// The agent's console (its stdout and stderr), written without ever blocking the caller.
//
// A write(2) to a pipe or terminal blocks for as long as the reader pleases (a stuck log
// shipper, a terminal paused with Ctrl-S), and the agent's loop must keep reacting to exits
// and signals meanwhile. Setting O_NONBLOCK is not an option: the flag lives on the file
// description the agent shares with its shell and the rest of a pipeline (and stays set after
// a SIGKILL); poll()'s POLLOUT only promises room for some bytes, not for a whole line. So one
// writer thread per console owns the blocking write(2), and callers append whole lines to a
// bounded queue. A reader that keeps reading is waited for: the queue may grow past its
// bound (up to kConsoleBurstFactor times it) while write(2) makes progress, so a burst from
// many ranks is not cut short by a reader that is merely slower than the burst. Once a
// write(2) has taken nothing for kConsoleStall with the queue past its bound (a stopped
// reader), or the queue reaches its hard limit, whole lines are dropped and counted until it
// has drained; then a notice in the stream says how many were lost (files under --log_dir
// keep everything: they are written by the caller, not through here).
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::launcher {

// Most bytes a console holds for a stopped reader; past it whole lines are dropped until the
// queue has drained. Twice the longest line the log router writes (1 MiB).
inline constexpr size_t kConsoleQueueBytes = size_t{2} << 20;
// A reader whose write(2) has taken nothing for this long is stopped, not slow.
inline constexpr std::chrono::milliseconds kConsoleStall{1000};
// While the reader keeps taking bytes, the queue may hold this many times its bound (16 MiB
// by default: the memory a burst may cost), never more.
inline constexpr size_t kConsoleBurstFactor = 8;
// At exit, queued output still goes out while the console takes it: the wait ends after this
// long without progress (a reader that stopped)...
inline constexpr std::chrono::milliseconds kConsoleExitStall{1000};
// ...or after this long in all (a reader that crawls).
inline constexpr std::chrono::milliseconds kConsoleExitLimit{5000};

// What a console does when its reader falls behind (--slow_console).
enum class SlowConsole {
  // Back-pressure (the default): nothing is dropped; the queue says it is congested() and the
  // caller stops reading the workers' pipes until it has room again (set_room_listener), as
  // a program writing to a slow pipe would block.
  kBlock,
  // The queue's bound holds: past it, with the reader stopped, whole lines are dropped and
  // counted (kConsoleStall, kConsoleBurstFactor) and a notice says so.
  kDrop,
};
// At exit with kBlock, queued output is waited for as long as the reader keeps taking it, and
// given up after this long without progress (a reader that stopped for good).
inline constexpr std::chrono::milliseconds kConsoleExitStallBlocking{10000};

// How a segment of a worker's stream ends: a newline, a carriage return (a progress bar
// redrawn in place), or not yet (a partial line shown before its end arrives).
enum class SegmentEnd { kNewline, kCarriage, kOpen };

// The live area on a terminal is redrawn at most this often (bars update at 10 Hz and more).
inline constexpr std::chrono::milliseconds kLiveRedrawInterval{100};

// The prefix of a line several local ranks printed (ascending), e.g. "[default0-7]:".
using GroupPrefix = std::function<std::string(const std::vector<int>& local_ranks)>;

// Output a console could not deliver.
struct ConsoleDrops {
  uint64_t lines = 0;
  uint64_t bytes = 0;
};

class Console {
 public:
  // Writes to fd (not owned; it must stay open while this exists). hint ends the drop notice
  // and says where the whole output is ("the log files under DIR keep everything").
  explicit Console(int fd, std::string hint = "", size_t max_queued_bytes = kConsoleQueueBytes,
                   std::chrono::milliseconds stall = kConsoleStall,
                   SlowConsole mode = SlowConsole::kDrop);
  // close() with the exit limits.
  ~Console();
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  // Queues text (whole lines, each ending in '\n') to be written with one write(2) per
  // PIPE_BUF of lines; never blocks. Dropped and counted when it does not fit (past the
  // queue's bound with the reader stopped for `stall`, or past its hard limit), while an
  // overflow has not drained yet, or once the console is gone (EPIPE: nobody reads).
  void write(std::string_view text);
  // A segment of one source's stream (source: any id, e.g. a worker's rank and stream). The
  // prefix is written where a new line of the source begins on the console: a continuation
  // of the source's open segment gets none; a carriage return is held back and written as
  // "\r" + prefix before the source's next segment, so a bar is redrawn in place with its
  // prefix; another source's text (or write()) first ends an open line with "\n", so two
  // sources never share a line. Never blocks.
  void write_segment(int source, std::string_view prefix, std::string_view body, SegmentEnd end);
  // A whole line of local_rank's stream (1 stdout, 2 stderr): with collapsing on, held up to
  // its window for the same text from other ranks and printed once with their group's prefix
  // (line_collapser.hpp); otherwise write_segment(prefix, body, kNewline) at once. Every other
  // write first lets the held lines out, so nothing passes them. Never blocks.
  void write_line(int local_rank, int stream, std::string_view prefix, std::string_view body);
  // Collapses identical lines of the ranks feeds names (feeds[r][s - 1]: rank r's stream s
  // comes here) from now on, each group prefixed by prefix(ranks). Ends any collapsing before.
  void begin_collapse(std::chrono::milliseconds window, std::vector<std::array<bool, 2>> feeds,
                      GroupPrefix prefix);
  // local_rank's worker ended: held lines wait for it no more.
  void rank_done(int local_rank);
  // Lets every held line out and stops collapsing.
  void end_collapse();
  // Keeps a live area at the bottom of this console (a terminal): set_live() lines are redrawn
  // in place below everything else written (live_area.hpp). Call before writing.
  void enable_live_area();
  [[nodiscard]] bool live_area() const;
  // source's line in the live area (prefix included); replaces its previous one.
  void set_live(int source, std::string line);
  // Removes source's line from the live area.
  void clear_live(int source);
  // With SlowConsole::kBlock: the queue is at its bound; stop feeding it until the room
  // listener is called. Always false with kDrop.
  [[nodiscard]] bool congested() const;
  // Called (on the writer's thread) when a congested queue has drained to half its bound.
  void set_room_listener(std::function<void()> listener);
  // Waits until everything queued is written (true), or the console took nothing for stall,
  // or limit passed (false).
  bool drain(std::chrono::milliseconds stall, std::chrono::milliseconds limit);
  // Ends the writer (later writes are dropped): drain(stall, limit), then the drop notice for
  // what was lost since the last one. Returns that notice when it could not be written here
  // ("" otherwise), so the caller can print it on another console. Idempotent.
  // The defaults: kConsoleExitStall and kConsoleExitLimit with kDrop; with kBlock,
  // kConsoleExitStallBlocking and no limit (a reader that keeps reading gets everything).
  std::string close(std::optional<std::chrono::milliseconds> stall = std::nullopt,
                    std::optional<std::chrono::milliseconds> limit = std::nullopt);
  // Everything dropped so far (reported or not).
  [[nodiscard]] ConsoleDrops dropped() const;
  [[nodiscard]] int fd() const;

  // "ddplaunch: console blocked: dropped N lines (M bytes) of output; HINT\n".
  [[nodiscard]] static std::string drop_notice(ConsoleDrops drops, const std::string& hint);

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;
};

// The agent's stdout and stderr consoles. When both fds lead to the same pipe, terminal or
// file (2>&1), they share one Console so that lines keep their order.
class Consoles {
 public:
  // live_on_terminal: a console writing to a terminal (not TERM=dumb) keeps a live area.
  Consoles(int out_fd, int err_fd, const std::string& hint, SlowConsole mode = SlowConsole::kDrop,
           bool live_on_terminal = false);
  ~Consoles();
  Consoles(const Consoles&) = delete;
  Consoles& operator=(const Consoles&) = delete;

  Console& out() { return *out_; }
  Console& err() { return err_ ? *err_ : *out_; }
  // The room listener of both consoles.
  void set_room_listener(const std::function<void()>& listener);
  // At exit: closes stdout's console, then stderr's; a drop notice stdout could not deliver
  // (its reader is stuck) is printed on stderr instead. Idempotent.
  void close();

 private:
  std::unique_ptr<Console> out_;
  std::unique_ptr<Console> err_;  // null when stderr shares stdout's destination
};

}  // namespace ddp::launcher
