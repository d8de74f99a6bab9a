#pragma once
// The agent's answer to a hang (docs/hangs.md). HangWatch finds hangs; this decides what the
// workers of this node get: a file-timer scope that killed its rank names that rank the
// culprit; a hung rank found by progress or /proc is asked for its stack (SIGABRT) and the
// group is stopped once it died, or after a grace when it does not; a node with only victims
// gives the culprit's node time to act first. Stopping the group is the agent's (a hook).
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "launcher/agent/worker_slots.hpp"
#include "launcher/hang/hang_watch.hpp"
#include "launcher/output/event_log.hpp"
#include "launcher/process/worker_group.hpp"

namespace ddp::launcher {

struct HangResponseOptions {
  std::chrono::milliseconds hang_timeout{0};  // --hang_timeout (0: no progress watching)
  bool file_timer = false;                    // TORCHELASTIC_ENABLE_FILE_TIMER=1
  std::filesystem::path timer_file;           // TORCHELASTIC_TIMER_FILE
  std::filesystem::path run_dir;
  std::chrono::milliseconds stop_timeout{30000};  // --stop_timeout: caps the dump graces
  // --peer_tolerance: ranks that wait on a node not heard from are not hung while the
  // tolerance may still count that node out (HangWatchOptions::unheard_limit).
  std::chrono::milliseconds peer_tolerance{15000};
  HangWatch::ProcReader read_proc;  // null: the real /proc
};

class HangResponse {
 public:
  struct Hooks {
    // The group failed of a hang and must stop (the agent ends the attempt).
    std::function<void()> stop_group;
    // The attempt failed of a hang, rank (-1: on another node) the first hung one here.
    std::function<void(int rank)> note_hang;
    // The workers run in a healthy group (a late timer does nothing otherwise).
    std::function<bool()> healthy;
  };

  // Starts hang detection when options ask for any (throws what HangWatch throws).
  HangResponse(boost::asio::io_context& io, HangResponseOptions options, EventLog& events,
               WorkerGroup& group, std::vector<WorkerSlot>& slots, Hooks hooks);
  HangResponse(const HangResponse&) = delete;
  HangResponse& operator=(const HangResponse&) = delete;

  [[nodiscard]] bool enabled() const { return watch_ != nullptr; }
  // Variables every worker gets ("NAME=value"; none when not enabled).
  [[nodiscard]] std::vector<std::string> worker_env() const;
  // Watches the current workers of round (connect: the job's store, for the other nodes' view).
  void begin(ProgressBoard::Connector connect, uint64_t round, int group_rank,
             int group_world_size);
  void worker_exited(int pid);
  // The group stops: no more checks, no timer.
  void end();
  // A rank asked for its stack still runs: the group waits for it before it stops.
  [[nodiscard]] bool dumps_pending() const;

 private:
  void on_timer_expired(const ExpiredTimer& timer);
  void on_hang(const HangReport& report, const std::vector<RankSnapshot>& all);
  // This node's ranks resumed after a hang: victims waiting on another node are kept.
  void on_resumed();
  // Drops what hang detection said of the workers (not of one still dumping its stack).
  void forget_hang_reports();
  // Stops the group grace from now unless it stopped meanwhile; line: what to say then.
  void stop_after(std::chrono::milliseconds grace, std::function<std::string()> line);

  HangResponseOptions options_;
  EventLog& events_;
  WorkerGroup& group_;
  std::vector<WorkerSlot>& slots_;
  Hooks hooks_;
  std::unique_ptr<HangWatch> watch_;
  boost::asio::steady_timer timer_;  // a dumped culprit that does not die; a victims' grace
  bool victims_waiting_ = false;     // timer_ is the victims' grace
};

}  // namespace ddp::launcher
