#pragma once
// The agent's hang detection (docs/hangs.md), on the agent's loop:
//  - torchrun's file timer (TORCHELASTIC_ENABLE_FILE_TIMER=1): expired scopes are reaped
//    with the signal their client asked for, and reported by name;
//  - with --hang_timeout: progress lines from the workers (DDPLAUNCH_PROGRESS_FILE), and
//    /proc for those that send none, feed a HangDetector checked a few times per timeout;
//    this node's view goes to the job's store (ProgressBoard), and when a rank is hung every
//    node's view is read back so that all agents name the same culprit.
// The agent decides what to do with a hang (dump, kill, restart); this class only finds it.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/hang/file_timer_server.hpp"
#include "launcher/hang/hang_analysis.hpp"
#include "launcher/hang/hang_detector.hpp"
#include "launcher/hang/progress_board.hpp"
#include "launcher/hang/progress_channel.hpp"
#include "launcher/process/proc_status.hpp"

namespace ddp::launcher {

struct HangWatchOptions {
  std::chrono::milliseconds timeout{0};  // --hang_timeout; 0: no progress watching
  bool file_timer = false;               // TORCHELASTIC_ENABLE_FILE_TIMER=1
  std::filesystem::path timer_file;      // TORCHELASTIC_TIMER_FILE (else in run_dir)
  std::filesystem::path run_dir;         // where the FIFOs are made
  // An expired file-timer scope first asks its process for the stack (SIGABRT), and sends its
  // signal this much later if the process is still there (FileTimerServer).
  std::chrono::milliseconds timer_dump_grace{0};
  // A node whose view was last written this long ago is unheard (ProgressBoard: a live agent
  // writes it every second): paused, or cut off from the store. Ranks that wait on it are
  // not hung: whether it is lost is the peer tolerance's to decide (the rendezvous, the
  // store's connections), so nothing is reported while it stays unheard for less than
  // unheard_limit, nor while the store does not answer this node (which may be the one cut
  // off). After that, a hang as any other.
  std::chrono::milliseconds unheard_after{3000};
  std::chrono::milliseconds unheard_limit{30000};
};

struct HangWatchCallbacks {
  // A file-timer scope expired; its worker was already sent the requested signal, or SIGABRT
  // for its stack with the signal to follow (ExpiredTimer::stack_requested).
  std::function<void(const ExpiredTimer&)> on_timer_expired;
  // Ranks are hung: the analysis over every node's ranks, and which of them are local.
  std::function<void(const HangReport&, const std::vector<RankSnapshot>& all)> on_hang;
  // After on_hang, every rank of this node made progress again (or ended) before the
  // attempt did: what was reported is over here (a victim whose culprit moved on).
  std::function<void()> on_resumed;
  // Warnings: bad FIFO lines, a rank that is slow, a wait on a node unheard; null: stderr.
  std::function<void(const std::string&)> warn;
};

class HangWatch {
 public:
  using ProcReader = std::function<std::optional<ProcStatus>(int pid)>;

  HangWatch(boost::asio::io_context& io, HangWatchOptions options, HangWatchCallbacks callbacks,
            ProcReader read_proc = read_proc_status);
  ~HangWatch();
  HangWatch(const HangWatch&) = delete;
  HangWatch& operator=(const HangWatch&) = delete;

  // Variables every worker gets (the FIFO paths), "NAME=value".
  [[nodiscard]] std::vector<std::string> worker_env() const;

  // A new group: the job's store (null: one node), this node's place, and its workers.
  void begin_attempt(ProgressBoard::Connector connect_store, uint64_t round, int group_rank,
                     int group_world_size, const std::vector<std::pair<int, int>>& rank_pids);
  void worker_exited(int pid);
  // The group is stopping: no more checks until the next begin_attempt.
  void end_attempt();

 private:
  [[nodiscard]] bool timeout_on() const { return options_.timeout.count() > 0; }
  void arm();
  void check();
  // On the loop, with every node's view: reports a hang, or keeps watching.
  void analyse(BoardView view);
  // Says once per attempt what is waited for instead of reporting a hang; true while the wait
  // is within options_.unheard_limit.
  bool wait_on_unheard(const HangReport& report, const BoardView& view);

  boost::asio::io_context& io_;
  HangWatchOptions options_;
  HangWatchCallbacks callbacks_;
  ProcReader read_proc_;
  HangDetector detector_;
  std::unique_ptr<FileTimerServer> file_timer_;
  std::unique_ptr<ProgressChannel> progress_;
  std::unique_ptr<ProgressBoard> board_;
  boost::asio::steady_timer timer_;
  uint64_t attempt_ = 0;  // late callbacks of an earlier attempt are ignored
  bool watching_ = false;
  bool reported_ = false;          // one report per attempt (until this node's ranks resume)
  bool hang_reported_ = false;     // on_hang was called: watching for the ranks to resume
  bool slow_reported_ = false;     // "waiting for a slow rank" said once per attempt
  bool unheard_reported_ = false;  // "waiting on a node unheard" said once per attempt
  // When the store stopped answering this node's collects (none: it answers).
  std::optional<HangDetector::Clock::time_point> store_silent_since_;
  // The last check: one far later than its interval means this agent did not run meanwhile.
  std::optional<HangDetector::Clock::time_point> last_check_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace ddp::launcher
