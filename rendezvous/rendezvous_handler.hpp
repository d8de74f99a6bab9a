#pragma once
// The seam between the agent and how nodes meet. The agent only sees this interface:
// single-node, static multi-node and dynamic (elastic) rendezvous all implement it,
// written against Store so they are testable on MemoryStore.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "rendezvous/store/store.hpp"

namespace ddp::rendezvous {

// What one closed round tells this node.
struct RendezvousInfo {
  uint64_t round = 0;        // increases by one each time the group re-forms
  int group_rank = 0;        // this node's rank among the nodes (GROUP_RANK)
  int group_world_size = 1;  // number of nodes in the round (GROUP_WORLD_SIZE)
  int rank_offset = 0;       // RANK of this node's LOCAL_RANK 0 (prefix sum of nproc)
  int world_size = 0;        // WORLD_SIZE: sum of every node's nproc
  std::string master_addr;   // store endpoint handed to workers (MASTER_ADDR)
  uint16_t master_port = 0;  // (MASTER_PORT)
  // Identifies the set of member nodes (equal in two rounds: the same nodes re-formed);
  // empty where membership never changes.
  std::string members;
};

// What kind of group a rendezvous forms: the agent asks this, never the flags.
struct RendezvousKind {
  // Groups re-form when a node is lost or joins (the dynamic rendezvous, on c10d or etcd);
  // false: the membership is fixed (static, single node), and a lost node ends the job.
  bool elastic = false;
  int min_nodes = 1;
  int max_nodes = 1;
  // The store moves to a successor when the node hosting it is lost (store_succession.hpp):
  // losing that node costs what losing any other does.
  bool store_moves = false;
};

// Why the running group must re-form without it being a worker failure.
enum class MembershipChange {
  kNodeWaiting,  // a node asked to join after the round closed: restart, no restart spent
  kNodeLost,     // a member node's agent disappeared: re-form (or fail if < MIN remain)
  kStoreLost,    // the rendezvous store failed (last_change() says how: death or silence)
  kSteppedDown,  // this node hosts the store and lost its majority: it stepped down
};

// Why a membership change was reported: readable text, and for kStoreLost what the store's
// failure says of its host (a closed connection is a death; no answer is silence).
struct ChangeReason {
  std::string text;
  PeerLoss loss = PeerLoss::kUnknown;
};

// The job ended while this node waited to be admitted (a spare, or a node that arrived while
// the group finished) and was never a member: nothing failed, the job did not need it.
class NotNeeded : public RendezvousClosed {
 public:
  using RendezvousClosed::RendezvousClosed;
};

// A node that arrived when the group was full stands by as a spare until a member leaves
// (the dynamic rendezvous): reported once when it starts standing by, once when admitted.
// A node that found a running group with room is about to ask it to re-form (kJoining): the
// rendezvous waits for workers_ready() (bounded by join_timeout) before it asks, so that the
// agent can start its workers first and the running ones do not wait for their start-up.
struct SpareNotice {
  enum class Kind { kStandingBy, kAdmitted, kJoining };
  Kind kind = Kind::kStandingBy;
  uint64_t round = 0;     // the round it waits to enter, or entered
  int group_full_at = 0;  // max nodes: the group's size when full
  int group_rank = -1;    // kAdmitted: this node's group rank in that round
};

// Opens another connection to the same (unprefixed) store; the watcher threads block in
// wait() and so need their own. For MemoryStore return the same shared store.
using StoreConnector = std::function<std::shared_ptr<Store>()>;

class RendezvousHandler {
 public:
  virtual ~RendezvousHandler() = default;

  // Blocks until a round including this node closes. Throws RendezvousError on timeout
  // (naming "k/N joined"), RendezvousClosed when the job already ended.
  virtual RendezvousInfo next_rendezvous() = 0;

  // Registers a callback for membership changes of the current round. Called from a
  // background thread (the agent posts it into its own loop); may be called again after
  // each next_rendezvous(). Implementations that never change (single node) never call it.
  virtual void watch(std::function<void(MembershipChange)> on_change) = 0;

  // This node's workers all succeeded. It counts itself out of the job: the other nodes keep
  // running, and once the last member is out the rendezvous is closed, so late nodes exit at
  // once. The node hosting the store blocks here until every member finished, failed or was
  // lost (the exit barrier), or until interrupt().
  virtual void shutdown() = 0;

  // shutdown() after a failed job (restarts exhausted, a rendezvous error, a signal): the
  // store host does not wait at the exit barrier for nodes that may be dead (torchrun runs
  // its exit barrier only after success). Default: shutdown().
  virtual void shutdown_after_failure() { shutdown(); }

  // Why the job can no longer restart its workers, whatever restarts are left, or "" when it
  // can: a static job one of whose nodes already finished (its ranks never come back). Asked
  // after a failed attempt, before a restart is spent; may take store round trips (the agent
  // asks off its loop). Default: "" (elastic jobs re-form without a finished node).
  [[nodiscard]] virtual std::string restart_blocker() { return {}; }

  // Ends a shutdown() blocked in the exit barrier on another thread (the agent was told to
  // stop). Safe from any thread; a no-op when nothing waits.
  virtual void interrupt() {}

  // A new connection to a store every node of the job shares, scoped to the job (the agent
  // publishes its ranks' progress there so that all nodes name the same hung rank). Called
  // off the agent's loop; nullptr where the job has no such store (one node).
  virtual std::shared_ptr<Store> connect_job_store() { return nullptr; }

  // What kind of group this rendezvous forms. Default: one node, fixed.
  [[nodiscard]] virtual RendezvousKind kind() const { return {}; }

  // Identifier of the job (TORCHELASTIC_RUN_ID).
  [[nodiscard]] virtual std::string run_id() const = 0;

  // Registers a callback for SpareNotice (called on the thread in next_rendezvous()).
  // Handlers whose groups are never full of spares (static, single node) never call it.
  virtual void watch_spare(const std::function<void(const SpareNotice&)>& /*on_spare*/) {}
  // This node's workers are started and ready for a round (after a kJoining notice: the
  // rendezvous may now ask the running group to re-form). Any thread.
  virtual void workers_ready() {}

  // Why the last membership change was reported, with the store's own error for kStoreLost
  // ("... receive failed: Connection timed out") and what it means: the agent tells silence
  // from a death by it. Empty text when the handler does not say.
  [[nodiscard]] virtual ChangeReason last_change() const { return {}; }
};

}  // namespace ddp::rendezvous
