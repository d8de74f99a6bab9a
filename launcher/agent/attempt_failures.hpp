#pragma once
// This node's failures in the current attempt: the assembled WorkerFailures, the attempt's one
// "failure" event, and which failure is the root cause that this node publishes. In an elastic
// job a peer's death often kills a worker here (its collective's connection resets) a moment
// before that node's loss claim arrives: the root failure can wait that long for one, and a
// loss claim meanwhile takes the window's failures for the loss's doing.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "launcher/output/error_report.hpp"
#include "launcher/output/event_log.hpp"

namespace ddp::launcher {

// How long a worker failure in an elastic job waits for a loss claim: a loss is claimed within
// a store round trip of a death (about 5 ms, docs/benchmarks.md), and a failure with no loss
// behind it still reaches every node within 0.3 s of the worker's exit.
inline constexpr std::chrono::milliseconds kLossClaimWindow{200};

class AttemptFailures {
 public:
  AttemptFailures(boost::asio::io_context& io, EventLog& events,
                  std::chrono::milliseconds window = kLossClaimWindow);

  // A new attempt: nothing failed, nothing noted, no window open.
  void reset();
  // Records the attempt's "failure" event (kind, rank, restart_count attempt), once per attempt.
  void note(const std::string& kind, int rank, int attempt);
  void add(WorkerFailure failure);
  // The failure just added is the root cause: the one this node publishes.
  void mark_root();
  // The root cause (the first failure of the window).
  [[nodiscard]] const WorkerFailure& root() const;
  // Holds the root failure for a loss claim: on_expired runs on the loop when none came.
  void wait_for_loss(std::function<void()> on_expired);
  // True while the root failure waits for a loss claim.
  [[nodiscard]] bool waiting_for_loss() const { return waiting_; }
  // A node was found lost while the window was open: the window's failures were its doing,
  // and are dropped (said in a line and a "failure_from_loss" event). False when none waited.
  bool absorb_loss();
  // Closes the window without a decision (the attempt ends another way).
  void close_window();

  [[nodiscard]] const std::vector<WorkerFailure>& all() const { return failures_; }

 private:
  EventLog& events_;
  std::chrono::milliseconds window_;
  boost::asio::steady_timer timer_;
  std::vector<WorkerFailure> failures_;
  size_t root_ = 0;  // index in failures_ of the root cause
  bool waiting_ = false;
  bool noted_ = false;
};

}  // namespace ddp::launcher
