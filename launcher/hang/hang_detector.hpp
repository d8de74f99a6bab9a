#pragma once
// Which of this node's ranks are hung: a rank whose progress has not moved for the hang
// timeout, or one with no progress source that stays stopped (state T) that long. A rank
// that reports nothing and runs is never hung (no false positives without a source), and
// a slow rank whose progress keeps moving never is either. Time is passed in, so tests
// drive it without sleeping.
#include <chrono>
#include <vector>

#include "common/progress_protocol.hpp"
#include "launcher/hang/hang_analysis.hpp"

namespace ddp::launcher {

class HangDetector {
 public:
  using Clock = std::chrono::steady_clock;

  explicit HangDetector(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  // A new attempt: one entry per local worker (global rank and pid), all started at now.
  void reset(const std::vector<std::pair<int, int>>& rank_pids, Clock::time_point now);
  // A progress line from a worker (matched by pid, else by rank). Returns false when it
  // belongs to no current worker. Progress moves when step, collective or phase change.
  bool on_progress(const progress::Report& report, Clock::time_point now);
  // The /proc state seen for a worker now (0 when gone).
  void on_state(int pid, char state, Clock::time_point now);
  void forget(int pid);
  [[nodiscard]] std::vector<int> pids() const;

  // Every tracked rank as the hang analysis sees it at now (hung flags set).
  [[nodiscard]] std::vector<RankSnapshot> snapshot(Clock::time_point now) const;
  [[nodiscard]] bool any_hung(Clock::time_point now) const;
  [[nodiscard]] std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  struct Tracked {
    int rank = 0;
    int pid = 0;
    bool has_source = false;
    progress::Report last;
    Clock::time_point moved;  // last progress change (or start)
    char state = 0;
    Clock::time_point stopped_since;  // when state T was first seen in a row
  };
  [[nodiscard]] bool hung(const Tracked& t, Clock::time_point now) const;

  std::chrono::milliseconds timeout_;
  std::vector<Tracked> ranks_;
};

}  // namespace ddp::launcher
