#pragma once
// torchrun's file timer, served on the agent's io_context: the server side of PyTorch's
// torch.distributed.elastic.timer.FileTimerClient (1.13 and 2.x speak the same protocol).
// Workers find the FIFO in $TORCHELASTIC_TIMER_FILE and write JSON lines to it:
//   {"version": 1, "pid": 4242, "scope_id": "step", "expiration_time": 1700000000.5,
//    "signal": 9}
// expiration_time is wall-clock seconds (time.time()); a negative one releases the
// (pid, scope_id) timer, any other acquires it or replaces its deadline. When a timer
// expires, the server sends its signal to the pid (none when signal <= 0, as torch does),
// forgets every timer of that pid and reports it. docs/hangs.md, "Sources of progress".
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "launcher/hang/fifo_reader.hpp"

namespace ddp::launcher {

struct ExpiredTimer {
  int pid = 0;
  std::string scope;           // the client's scope_id
  double expiration_time = 0;  // the deadline it missed (wall clock, seconds since the epoch)
  int signal = 0;              // the signal sent; 0: the request asked for none
  int kill_error = 0;          // errno of kill(2), 0 when sent (or none asked); ESRCH: gone
  // With set_stack_dump_grace: SIGABRT was sent for the stack, and `signal` follows after the
  // grace unless the process is gone by then (kill_error is SIGABRT's).
  bool stack_requested = false;
};

// Everything runs on io's thread: call the members from there too (the agent's one loop).
class FileTimerServer {
 public:
  using ExpiryHandler = std::function<void(const ExpiredTimer&)>;

  // Creates (or reuses) the FIFO at fifo_path and serves it on io; on_expired runs on io's
  // thread once per reaped pid, after the signal was sent and the pid's timers forgotten. It
  // may call clear()/clear_all() but must not destroy the server. Throws ddp::Error naming the
  // path when the FIFO cannot be made or opened (FifoReader).
  FileTimerServer(boost::asio::io_context& io, std::filesystem::path fifo_path,
                  ExpiryHandler on_expired);
  // Stops serving; removes the FIFO if it made it.
  ~FileTimerServer();
  FileTimerServer(const FileTimerServer&) = delete;
  FileTimerServer& operator=(const FileTimerServer&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const;
  // A worker exited: forget its timers (torch clears timers of dead pids too). Call it for
  // every pid a stopped group leaves behind, or clear_all(), so a stale deadline never
  // signals a process that reused the pid.
  void clear(int pid);
  void clear_all();

  // Only requests from pids accept(pid) allows are served (e.g. the agent's workers and
  // their descendants); the others count as bad requests. Default: every pid.
  void set_pid_filter(std::function<bool(int pid)> accept);
  // Before a timer's signal (> 0), ask the process for its stack as --hang_timeout does:
  // SIGABRT (and SIGCONT), on which Python's faulthandler and the native runtime print it;
  // then the timer's own signal after grace, unless clear(pid) came first (it died). 0, the
  // default: the signal at once, as torch's server does.
  void set_stack_dump_grace(std::chrono::milliseconds grace);
  // Replaces warn_through_log as the place warnings go (bad requests, failed kills).
  void set_warning_sink(WarningSink sink);

  // Timers waiting for their deadline.
  [[nodiscard]] size_t active_timers() const;
  // Lines received (good and bad) and lines ignored as bad.
  [[nodiscard]] uint64_t requests() const;
  [[nodiscard]] uint64_t bad_requests() const;

 private:
  struct Impl;
  // Shared with the pending timer wait, which holds it weakly.
  std::shared_ptr<Impl> impl_;
};

}  // namespace ddp::launcher
