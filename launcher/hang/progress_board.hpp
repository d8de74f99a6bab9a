#pragma once
// Makes every node's view of its ranks' progress visible to the others through the job's
// store, so that all agents analyse the same snapshots and name the same culprit. One key
// per node and round (hang/<round>/<group_rank>: the time it was written and a JSON array of
// its ranks), written when it changed and at least every `refresh` while it did not: how
// long ago a node last wrote tells whether its agent runs and reaches the store (a paused
// or cut-off node's peers wait on it, and must not take their own ranks for hung). Store
// calls run on a thread of the board's own: a slow or dead store never blocks the agent's
// loop. Without a store (one node) it only echoes the local view.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launcher/hang/hang_analysis.hpp"
#include "rendezvous/store/store.hpp"

namespace ddp::launcher {

// Snapshots travel with wall-clock times so a reader recomputes how long each rank has
// been silent and how long ago its node wrote (RankSnapshot::unheard_s); exposed for tests.
std::string encode_snapshots(const std::vector<RankSnapshot>& ranks, int64_t now_ms);
std::vector<RankSnapshot> decode_snapshots(const std::string& text, int64_t now_ms);

// What collect() found: every node's ranks, and whether the store answered (when it did
// not, only this node's ranks are there, and this node may be the one cut off).
struct BoardView {
  std::vector<RankSnapshot> ranks;
  bool store_answered = true;
};

class ProgressBoard {
 public:
  using Connector = std::function<std::shared_ptr<rendezvous::Store>()>;
  // connect: opens the job's store on the board's thread when first needed, and again after
  // a call on it failed (null or returning null: this node is alone).
  // refresh: how often an unchanged view is written again.
  explicit ProgressBoard(Connector connect,
                         std::chrono::milliseconds refresh = std::chrono::seconds(1));
  ~ProgressBoard();
  ProgressBoard(const ProgressBoard&) = delete;
  ProgressBoard& operator=(const ProgressBoard&) = delete;

  // A new group: this node is group_rank of group_world_size in round.
  void begin_round(uint64_t round, int group_rank, int group_world_size);
  // This node's ranks now (the latest call wins; written in the background).
  void publish(std::vector<RankSnapshot> local);
  // Every node's ranks (this node's from `local`, written first), delivered to done on the
  // board's thread. Nodes that published nothing are missing from the result.
  void collect(std::vector<RankSnapshot> local, std::function<void(BoardView)> done);

 private:
  void run();
  // The store, connected on first use and again (at most once a second) after a call on it
  // failed (board thread only); null when there is none, or none reachable now.
  rendezvous::Store* store();
  // Forgets the connection after a failed call, so the next one opens a fresh connection.
  void drop_store();

  Connector connect_;
  std::chrono::milliseconds refresh_;
  bool alone_ = false;  // the connector said there is no store (one node)
  std::optional<std::chrono::steady_clock::time_point> last_connect_;
  std::shared_ptr<rendezvous::Store> store_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  uint64_t round_ = 0;
  int group_rank_ = 0;
  int group_world_size_ = 1;
  std::optional<std::vector<RankSnapshot>> pending_;  // to publish
  std::string last_written_;  // the ranks as last written (without the time)
  int64_t last_write_ms_ = 0;
  std::vector<std::pair<std::vector<RankSnapshot>, std::function<void(BoardView)>>> collects_;
  std::thread thread_;
};

}  // namespace ddp::launcher
