#pragma once
// Standby workers (--standby_workers N, docs/recovery.md "Standby workers"): parked processes
// of this node, started while the workers run, that take the place of one of them that dies
// (a crash, or a hang that detection ended). They run the worker's program with
// DDPLAUNCH_SPARE=1 DDPLAUNCH_STANDBY=1 and neither the round's variables nor LOCAL_RANK,
// import and set up what does not depend on the rank, say hello on their recovery channel and
// wait. take() hands one over with its process, its channel and the output it wrote while it
// stood by; the round notice it then gets names its place (local_rank included). What the
// replaced worker cost before, a fresh process's start-up (Python, `import torch`, the script's
// set-up: seconds), is paid by the standby ahead of time.
//
// A standby that dies while it stands by is started again; one that dies before it ever
// listened on its channel, or that does not listen within --recovery_timeout (a program that
// cannot be parked), turns the pool off for the rest of the job, with a warning saying why:
// a failure then restarts the node's workers, as without standbys.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/recovery_protocol.hpp"
#include "launcher/output/event_log.hpp"
#include "launcher/process/recovery_link.hpp"
#include "launcher/process/worker_spawner.hpp"

namespace ddp::launcher {

class StandbyPool {
 public:
  // The process of a standby (argv, the env contract without a place, its error file).
  using SpecMaker = std::function<WorkerProcessSpec(const std::string& error_file)>;

  // What take() hands to a dead worker's slot.
  class Standby {
   public:
    int pid = 0;
    std::unique_ptr<RecoveryLink> link;
    bool hello = false;      // it listens on its channel already
    std::string error_file;  // TORCHELASTIC_ERROR_FILE as it was started with
    std::chrono::steady_clock::time_point started;
    // From now on its output and exit go to callbacks (first the output it wrote while it
    // stood by) and its channel's messages to on_message.
    void connect(WorkerCallbacks callbacks, RecoveryLink::MessageHandler on_message);

   private:
    friend class StandbyPool;
    struct Route;
    std::shared_ptr<Route> route_;
  };

  // count: --standby_workers; hello_timeout: --recovery_timeout; dir: where their error files
  // go (dir/standby_<n>/error.json).
  StandbyPool(boost::asio::io_context& io, WorkerSpawner& spawner, EventLog& events, int count,
              std::chrono::milliseconds hello_timeout, std::filesystem::path dir, SpecMaker spec);
  ~StandbyPool();
  StandbyPool(const StandbyPool&) = delete;
  StandbyPool& operator=(const StandbyPool&) = delete;

  // Starts standbys until count stand by (nothing when off or count is 0).
  void fill();
  // A standby stands by (listening, or still starting): take() has one to give.
  [[nodiscard]] bool available() const { return !standing_.empty(); }
  [[nodiscard]] size_t size() const { return standing_.size(); }
  // The standby that has waited longest among those listening (else the oldest still
  // starting), out of the pool; nullopt when none stands by. The caller connect()s it.
  std::optional<Standby> take();
  // Kills every standby (the agent leaves, or stops its workers for good): they hold no work.
  void stop_all();
  // False once the pool turned itself off (said why).
  [[nodiscard]] bool on() const { return on_; }

 private:
  struct Entry;
  void start_one();
  void on_exit(uint64_t id, ExitStatus status);
  void on_hello(uint64_t id);
  void turn_off(const std::string& why);
  Entry* find(uint64_t id);

  boost::asio::io_context& io_;
  WorkerSpawner& spawner_;
  EventLog& events_;
  int count_;
  std::chrono::milliseconds hello_timeout_;
  std::filesystem::path dir_;
  SpecMaker spec_;
  std::vector<std::unique_ptr<Entry>> standing_;
  uint64_t next_id_ = 0;
  int deaths_in_a_row_ = 0;  // standbys that died without being taken, since the last take
  bool on_ = true;
  bool stopping_ = false;
};

}  // namespace ddp::launcher
