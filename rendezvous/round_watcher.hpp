#pragma once
// Watches one closed round of the dynamic rendezvous from a running agent:
//  - the events thread writes this node's heartbeat every heartbeat_interval and, between
//    beats, blocks in wait() on the round's change slots (membership_claims.hpp), so a late
//    joiner, a re-joining member or a lost node is noticed as soon as it is claimed. Each
//    claim is checked against the store before anyone acts on it;
//  - the monitor thread blocks on the heartbeat keys of the next group rank (a ring, so
//    every node is watched by exactly one other, O(1) store traffic per node) and declares
//    it lost when no beat arrives within lease_timeout (catches SIGKILLed, SIGSTOPped and
//    unplugged nodes, where no connection reset ever arrives). A node that left the round
//    on its own (finished, failed, re-joined a newer round) is not lost: the monitor moves
//    on to the next rank of the ring that is still in.
// Each thread owns its own store connection because wait() blocks the connection.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/rendezvous_handler.hpp"
#include "rendezvous/store/store.hpp"

namespace ddp::rendezvous {

struct RoundWatcherOptions {
  uint64_t round = 0;
  int group_rank = 0;
  int group_world_size = 1;
  Duration heartbeat_interval = std::chrono::seconds(1);
  // No beat from the watched node for this long: it is lost.
  Duration lease_timeout = std::chrono::seconds(5);
  // False: no heartbeats; a node is lost when its presence ends (the store's own liveness:
  // etcd leases, whose expiry posts a claim) or when it never bound one; the monitor thread
  // checks the next rank of the ring for both every max(heartbeat_interval, lease/2).
  bool heartbeats = true;
  // This node serves a store that can move (store_succession.hpp): the monitor also watches
  // every rank's heartbeat, and once a strict majority of the round has been silent for
  // tolerance it reports kSteppedDown (this node must stop serving).
  bool quorum = false;
  Duration tolerance = std::chrono::seconds(15);
};

// The lease that takes a node silent for longer than tolerance for lost, and none silent for
// less: its last beat came up to heartbeat_interval before the silence began, and its first
// beat after it needs up to 2 s more to get through (common/tcp_liveness.hpp: a resend a
// second, a link coming back) and some scheduling. A silent node is then found between
// tolerance + 2.5 s and tolerance + heartbeat_interval + 2.5 s after its silence began.
Duration lease_for(Duration tolerance, Duration heartbeat_interval);

// Called at most once per round, from a watcher thread: what changed and why.
using ChangeCallback = std::function<void(MembershipChange, const ChangeReason&)>;

class RoundWatcher {
 public:
  // Starts both threads. events_store and monitor_store are distinct connections to the
  // rendezvous' (prefixed) store; on_change must not block for long.
  RoundWatcher(RoundWatcherOptions options, std::shared_ptr<Store> events_store,
               std::shared_ptr<Store> monitor_store, ChangeCallback on_change);
  ~RoundWatcher();  // stop()
  RoundWatcher(const RoundWatcher&) = delete;
  RoundWatcher& operator=(const RoundWatcher&) = delete;

  // Stops beating and watching; returns within about one heartbeat_interval. Idempotent.
  void stop();
  // Asks the threads to stop without waiting for them (stop() or the destructor joins).
  void request_stop() { stop_ = true; }
  // This node left the round (its workers finished): stop beating and listening to claims,
  // but keep monitoring the others, so the store host waiting for them sees a loss.
  void stop_beating() { beating_ = false; }

 private:
  void events_loop();
  void monitor_loop();
  // Without heartbeats: watches the next rank of the ring for a presence that ended, or was
  // never bound (the store's own liveness covers the rest: on_close records).
  void presence_monitor_loop();
  void beat(Store& store);
  // Checks a claim against the store; "" when it holds, else why it is false.
  std::string refutation(Store& store, const std::string& value);
  // True when group rank g writes a heartbeat within 1.5 intervals (this node keeps beating).
  bool still_beating(Store& store, int g);
  // True when group rank g bound a presence to this round and the store removed it (its
  // connection closed).
  bool connection_gone(Store& store, int g) const;
  void fire(MembershipChange change, const std::string& reason, PeerLoss loss = PeerLoss::kUnknown);
  // With options_.quorum, every heartbeat_interval: reads every rank's
  // latest beat; true (and kSteppedDown fired) once a strict majority is silent. stall: how
  // long this node itself was unresponsive since the last pass (not held against anyone).
  bool quorum_lost(Store& store, std::chrono::steady_clock::duration stall);
  // The store failed under a watcher thread (e, a StoreError or anything else).
  void store_lost(const std::exception& e);

  RoundWatcherOptions options_;
  std::shared_ptr<Store> events_store_;
  std::shared_ptr<Store> monitor_store_;
  ChangeCallback on_change_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> beating_{true};
  std::atomic<bool> fired_{false};
  uint64_t tick_ = 0;  // events thread only
  // The quorum check's view (monitor thread only): each rank's last tick, when it last moved.
  std::vector<int64_t> quorum_ticks_;
  std::vector<std::chrono::steady_clock::time_point> quorum_seen_;
  std::chrono::steady_clock::time_point quorum_next_{};
  std::chrono::steady_clock::time_point next_beat_{};
  std::thread events_thread_;
  std::thread monitor_thread_;
};

}  // namespace ddp::rendezvous
