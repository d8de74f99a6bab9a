#pragma once
// Every agent of a multi-node job watches its attempt's failure record (failure_record.hpp)
// with a blocking WAIT on a store connection of its own, on a thread of its own, so a failure
// on any node reaches every node within a store round trip. The same connection tells it when
// the store itself is gone (its host died): the WAIT fails at once.
//
// Stopping never waits for the thread: it is told to stop and to call nobody back, and ends
// by itself when its WAIT (cut in slices) next returns; it owns what it uses.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/error.hpp"
#include "common/peer_tolerance.hpp"
#include "rendezvous/failure_record.hpp"
#include "rendezvous/store/store.hpp"

namespace ddp::rendezvous {

struct FailureWatchCallbacks {
  // The attempt's record appeared (called at most once, from the watch thread).
  std::function<void(const FailureRecord&)> on_failure;
  // The store connection failed (called at most once, instead of on_failure): the message
  // names the store and the error; loss says whether its host is gone or silent (silence only
  // once it lasted the tolerance: until then the watch keeps trying).
  std::function<void(const std::string&, PeerLoss)> on_store_lost;
  // A WAIT slice answered at least kStoreStallReport later than it should have (the store was
  // silent, a network blip, or this process was paused) and the store then answered: how much
  // later. Optional; called from the watch thread, at most once per stall.
  std::function<void(Duration)> on_store_stall;
};

// How late a WAIT slice's answer must be to count as a stall rather than ordinary scheduling.
inline constexpr Duration kStoreStallReport{1000};

class FailureWatch {
 public:
  // wait_store and publish_store are two connections of their own to the job's (prefixed)
  // store: the watch thread blocks in the first, publishing uses the second. group_rank is
  // this node's, for acknowledging a store host's "store_leaving" (-1: never acknowledge).
  // tolerance: how long the store may go unheard (errors that mean silence) before it counts
  // as lost (the peer tolerance).
  FailureWatch(std::shared_ptr<Store> wait_store, std::shared_ptr<Store> publish_store,
               uint64_t attempt, int group_rank, FailureWatchCallbacks callbacks,
               Duration slice = std::chrono::milliseconds(2000),
               Duration tolerance = kDefaultPeerTolerance);
  ~FailureWatch();
  FailureWatch(const FailureWatch&) = delete;
  FailureWatch& operator=(const FailureWatch&) = delete;

  // Publishes record for this attempt (COMPARE_SET, first wins) on a thread of its own; the
  // record that holds (ours or an earlier one) reaches on_failure at once.
  void publish(FailureRecord record);
  // Waits up to timeout until every publish() went out (or failed): an agent about to exit
  // must not take its record with it. False on timeout.
  bool flush(Duration timeout);
  // The attempt's record as the store holds it now (one read on the publishing connection),
  // whatever the watch has delivered so far: a node about to exit must not miss a record that
  // its watch has not reported yet. nullopt when there is none, or when it cannot be read
  // (the store is gone, the record does not parse).
  std::optional<FailureRecord> read_record() const;
  // No callback runs once this returns. Idempotent.
  void stop();

  struct Shared;  // what the detached threads share with this object (failure_watch.cpp)

 private:
  std::shared_ptr<Shared> shared_;
};

}  // namespace ddp::rendezvous
