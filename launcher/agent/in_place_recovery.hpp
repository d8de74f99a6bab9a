#pragma once
// In-place recovery, the agent's side (docs/recovery.md). With --in_place_recovery a
// membership change (a node lost or joining, a failure on another node) does not stop this
// node's workers: they are told to abort their collectives and kept while the agent re-joins
// the rendezvous, then each is told its new rank over its recovery channel (recovery_link.hpp).
// A worker that cannot take part (it died meanwhile, never spoke the protocol, or did not
// build its group within --recovery_timeout) is replaced by a fresh one in the new round,
// which gets the training state from the survivors. This class keeps each worker's channel and
// progress and the phase times of each recovery; the agent decides when one starts and starts
// or kills workers through its hooks.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/recovery_protocol.hpp"
#include "launcher/output/event_log.hpp"
#include "launcher/process/exit_status.hpp"
#include "launcher/process/proc_status.hpp"
#include "launcher/process/recovery_link.hpp"
#include "launcher/process/worker_group.hpp"

namespace ddp::launcher {

// One completed (or abandoned) in-place recovery, with its phase times.
struct RecoveryRecord {
  std::string reason;  // node_lost, node_waiting, job_failure
  int64_t from_round = 0;
  int64_t round = -1;  // the round re-formed into (-1: not yet)
  std::chrono::steady_clock::time_point noticed;
  std::optional<std::chrono::steady_clock::time_point> aborted, reformed, state_sent, first_step;
  int kept = 0;       // workers that re-formed in place
  int restarted = 0;  // workers started afresh for the round
  int64_t step = -1;  // the step the group resumed from
  int source = -1;    // the rank whose state was sent (-1: none)
  int64_t state_bytes = 0;
  bool reported = false;
};

// "round 0 -> 1 (node_lost): aborted 2 ms, ... after it was noticed; 1 kept, ..."
std::string describe_recovery(const RecoveryRecord& record);

class InPlaceRecovery {
 public:
  struct Hooks {
    // Starts a fresh worker in slot index for the current round; false when it could not.
    std::function<bool(size_t index)> start_worker;
    // The notice that tells slot index's kept worker its place in the new round.
    std::function<recovery::Message(size_t index)> notice;
    // The rank of slot index in the current round (for messages).
    std::function<int(size_t index)> rank_of;
    // The workers run in a healthy group (a timeout while the group stops means nothing).
    std::function<bool()> healthy;
    // A worker's /proc state (the agent's reader, as hang detection uses); null: the real /proc.
    std::function<std::optional<ProcStatus>(int pid)> read_proc;
    // The parked workers are as ready as they will be before admission: every one listens on
    // its channel, or --recovery_timeout passed, or one was given up on (null: nobody to tell).
    std::function<void()> parked_ready;
    // Every running worker of a round (not parked) listens on its channel: it said hello last
    // (null: nobody to tell). Standby workers start then, not beside the workers' own start-up.
    std::function<void()> listening;
  };

  // enabled: --in_place_recovery; timeout: --recovery_timeout.
  InPlaceRecovery(boost::asio::io_context& io, bool enabled, std::chrono::milliseconds timeout,
                  EventLog& events, WorkerGroup& group, Hooks hooks);
  InPlaceRecovery(const InPlaceRecovery&) = delete;
  InPlaceRecovery& operator=(const InPlaceRecovery&) = delete;

  [[nodiscard]] bool enabled() const { return enabled_; }
  // A recovery is under way: the workers run while the group re-forms.
  [[nodiscard]] bool under_way() const { return under_way_; }

  // A fresh group of count slots (a restart): every channel and its progress forgotten.
  void reset(size_t count);
  // Opens slot index's channel for a worker about to start (a fresh one each time); its
  // messages arrive through on_message. The worker's end, or -1 when not enabled.
  int open_channel(size_t index, const RecoveryLink::MessageHandler& on_message);
  // The worker of slot index started: the agent's copy of its end is closed.
  void worker_started(size_t index);
  // Slot index's worker is now a standby worker (standby_pool.hpp) with its channel link
  // (whose messages the caller routes to on_message): it gets its round notice at once when it
  // listens already (hello), or as soon as it does.
  void adopt(size_t index, std::unique_ptr<RecoveryLink> link, bool hello);
  // A message from slot index's worker.
  void on_message(size_t index, const recovery::Message& message);

  // Starts a recovery from round from_round: the running workers that speak the protocol are
  // told to abort their collectives.
  void begin(const std::string& reason, int64_t from_round);
  // Gives up a recovery under way (a signal, a failure): nothing to resume.
  void abandon() { under_way_ = parked_ = false; }
  // This node's workers are about to start before it is admitted into a round (a spare, or a
  // node joining a running group: reason spare_admitted or joined): they wait, parked, for the
  // round notice resume() sends (one still starting gets it once it says hello). One that
  // dies meanwhile is started again once, then left to a fresh start at admission.
  void park(const std::string& reason);
  // This node's workers are parked (their environment says so: DDPLAUNCH_SPARE).
  [[nodiscard]] bool parked() const { return parked_; }
  // The group re-formed into round: kept workers get their notice, dead ones are replaced,
  // silent ones killed (and replaced once they exit).
  enum class Resumed {
    kRunning,      // the workers run in the new round
    kAllFinished,  // every worker finished its work while the group re-formed
    kStartFailed,  // a fresh worker could not start (start_worker said so; the agent stops)
  };
  Resumed resume(int64_t round);
  // What a worker's exit means to a recovery (the agent's current round is `round`).
  enum class ExitMeaning {
    kNone,           // nothing: the agent treats it as it would without recovery
    kFinished,       // it finished its work while the group re-formed: released, not replaced
    kReplacedLater,  // died while the group re-forms: a fresh one in the new round
    kReplacedNow,    // killed for not answering, or failed before it re-formed: replaced now
  };
  ExitMeaning on_exit(size_t index, ExitStatus status, bool group_running, int64_t round);

  // One line per completed recovery, for the end of the run ("" when none).
  [[nodiscard]] std::string summary() const;
  [[nodiscard]] size_t completed() const { return completed_.size(); }

 private:
  // Per slot: its channel and how far it got in the recovery under way.
  struct Progress {
    std::unique_ptr<RecoveryLink> link;
    bool hello = false;            // the worker's runtime listens on its channel
    bool respawn_on_exit = false;  // killed for the new round: start a fresh one
    bool finished = false;         // exited 0 while the group re-formed: done
    bool notice_on_hello = false;  // a parked worker still starting: its notice on hello
    int parked_restarts = 0;       // started again after dying while parked
    int64_t aborted_round = -1;    // the last round it aborted collectives of
    int64_t built_round = -1;      // the last round it built its group in ("built")
    int64_t replaced_round = -1;   // the round a fresh worker last replaced it in
    int64_t answered_round = -1;   // the last round it re-formed in ("joined")
    int64_t stepped_round = -1;    // ... and made its first step in ("stepped")
  };
  void on_timeout();
  void report();
  // Says once every parked worker is listening (hooks' parked_ready).
  void report_ready();
  // True when every running worker said hello.
  [[nodiscard]] bool all_listening() const;
  // True when every worker still to take part (not finished) reached round in field.
  [[nodiscard]] bool all_reached(int64_t Progress::*field, int64_t round) const;
  // Workers of the current round kept in place, and those started afresh for it.
  [[nodiscard]] std::pair<int, int> kept_and_replaced(int64_t round) const;

  boost::asio::io_context& io_;
  bool enabled_;
  std::chrono::milliseconds timeout_;
  EventLog& events_;
  WorkerGroup& group_;
  Hooks hooks_;
  std::vector<Progress> slots_;
  bool under_way_ = false;
  bool parked_ = false;
  int64_t round_ = -1;  // the round workers run in (what their messages must name)
  RecoveryRecord current_;
  std::vector<RecoveryRecord> completed_;
  boost::asio::steady_timer timer_;
};

}  // namespace ddp::launcher
