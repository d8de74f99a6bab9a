#pragma once
// The elastic (c10d-style) rendezvous, store-native: each node does O(1) store operations
// per round (ADD for its arrival index, SET of its record, WAITs on per-round keys, GET of
// its assignment); only the node that closes a round reads the arrivals (one MULTI_GET)
// and writes every assignment (one MULTI_SET). Nobody polls: every wait blocks in the store.
//
// A round closes at once when max_nodes arrived, or last_call_timeout after min_nodes
// arrived. Nodes arriving after a round closed wait for the next round, which opens when a
// member of the running round re-joins; if the running round has room they ask it to
// re-form (MembershipChange::kNodeWaiting on every member). See docs/multinode.md.
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "common/deadline.hpp"
#include "rendezvous/assignment.hpp"
#include "rendezvous/rdzv_conf.hpp"
#include "rendezvous/rendezvous_handler.hpp"
#include "rendezvous/store/store.hpp"
#include "rendezvous/store_succession.hpp"
#include "rendezvous/store_takeover.hpp"
#include "rendezvous/worker_store_host.hpp"

namespace ddp::rendezvous {

class RoundWatcher;

struct DynamicRendezvousOptions {
  std::string run_id = "none";  // keys live under "/ddp_rdzv/<run_id>/": jobs never mix
  int min_nodes = 1;
  int max_nodes = 1;
  int local_world_size = 1;  // this node's nproc
  std::string node_addr;     // this node's address, for node ids and messages
  std::string master_addr;   // store endpoint handed to workers (MASTER_ADDR/MASTER_PORT)
  uint16_t master_port = 0;
  // Whole next_rendezvous() budget: waiting to be admitted and for min_nodes to arrive.
  Duration join_timeout = std::chrono::seconds(600);
  // How long a round stays open for more nodes once min_nodes arrived.
  Duration last_call_timeout = std::chrono::seconds(30);
  // Whether a re-formed round waits (up to last_call_timeout) for members found silent
  // ("lost": maybe only paused or cut off for a while) before it closes without them. On,
  // as torchrun does: a node back within the last call joins the same round, where a second
  // re-form would restart every worker again. Off with in-place recovery, where that second
  // re-form keeps every worker and costs a fraction of a second: the survivors go on as soon
  // as every member not found silent is back.
  bool wait_for_lost = true;
  // How long members wait for the closing node to publish the ranks.
  Duration close_timeout = std::chrono::seconds(30);
  Duration heartbeat_interval = std::chrono::seconds(1);
  Duration lease_timeout = std::chrono::seconds(5);  // missed beats: node lost
  // Heartbeat keys of our own. Off where the store's presences carry liveness themselves
  // (etcd leases: a dead agent's keys expire with its lease, and the others' watches fire).
  bool heartbeats = true;
  // Null: the workers use the rendezvous store (master_addr/master_port). Set: group rank 0
  // of each round hosts the workers' store and publishes its address (the etcd backend).
  std::shared_ptr<WorkerStoreHost> worker_store;
  Duration progress_interval = std::chrono::seconds(5);
  // Start heartbeats and change watching after each round (benchmarks turn it off).
  bool watch_membership = true;
  // This agent hosts the store: shutdown() then waits (up to exit_barrier_timeout) until
  // every member of the last round has finished, failed or been lost (and, when the others
  // re-formed without this node, every member of their newer rounds), so nobody loses the
  // store mid-run.
  bool hosts_store = false;
  Duration exit_barrier_timeout = std::chrono::seconds(300);

  // Store succession (store_succession.hpp): when dial is set, the store may move to a
  // member's standby after its host is lost. dial opens a connection to the store at an
  // endpoint within a connect timeout (the job's secret included).
  std::function<std::shared_ptr<Store>(const Endpoint&, Duration)> dial;
  // Where this node's standby store listens (the store itself for the node hosting it);
  // empty host: none (the node never carries the store on).
  Endpoint standby;
  // How long silence is only silence (--peer_tolerance): the store's host steps down once a
  // strict majority of its round has been silent this long.
  Duration tolerance = std::chrono::seconds(15);
  // After silence, how long past losing the store a survivor waits before the successor's
  // store opens: the host, which stops hearing its round at about the same time, steps down
  // first.
  Duration takeover_margin = std::chrono::seconds(2);
};

class DynamicRendezvous final : public RendezvousHandler {
 public:
  // Validates options (ConfigError naming the bad value). store is this agent's main
  // connection; connect opens two more per round for the watcher threads, and one for
  // shutdown().
  DynamicRendezvous(DynamicRendezvousOptions options, std::shared_ptr<Store> store,
                    StoreConnector connect);
  ~DynamicRendezvous() override;  // stops the watcher threads; does not close the job

  // A round (see RendezvousHandler). A store that does not answer (PeerLoss::kSilence) is
  // tried again until join_timeout, with a line every progress_interval: a node cut off for
  // longer than the peer tolerance comes back once its link does.
  RendezvousInfo next_rendezvous() override;
  void watch(std::function<void(MembershipChange)> on_change) override;
  // A node that finds the group full stands by as a spare: it waits (without join_timeout)
  // for a round with room, and leaves with NotNeeded when the job ends without it.
  void watch_spare(const std::function<void(const SpareNotice&)>& on_spare) override;
  void workers_ready() override;
  // This node finished: counts it out of its round; the last member out closes the
  // rendezvous. When this node never completed a round (a signal during rendezvous) it
  // closes the rendezvous at once (a spare standing by leaves it open: the job goes on
  // without it); safe to call from another thread while next_rendezvous()
  // blocks (which then throws RendezvousClosed).
  void shutdown() override;
  // Closes the rendezvous for every node of the job (torchrun's shutdown) without waiting.
  void shutdown_after_failure() override;
  void interrupt() override;
  [[nodiscard]] std::string run_id() const override { return options_.run_id; }
  [[nodiscard]] RendezvousKind kind() const override {
    return {true, options_.min_nodes, options_.max_nodes, static_cast<bool>(options_.dial)};
  }
  // Where the rendezvous store is now (it moves to a successor's standby when its host is
  // lost): what the workers dial, and where the worker namespace is declared.
  [[nodiscard]] Endpoint store_endpoint() const;

  // Unique id of this agent in the records ("<addr>:<pid>:<random>").
  [[nodiscard]] const std::string& node_id() const { return node_id_; }
  // The last membership change's reason, for the agent (empty when none yet).
  [[nodiscard]] ChangeReason last_change() const override;

  std::shared_ptr<Store> connect_job_store() override { return side_connection(); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Closing {
    int64_t count = 0;   // members are arrivals 1..count; -1: rendezvous shut down
    int64_t closer = 0;  // arrival index of the node that closed the round
  };

  // One try of next_rendezvous() within deadline.
  RendezvousInfo join_round(const Deadline& join_deadline);
  // The store failed (how: what its failure says of its host): moves the rendezvous to the
  // successor's store (store_succession.hpp), re-seeded with what the survivors know of the
  // last round, or back to the same store if it answers again and did not step down. Throws
  // RendezvousError when none opens within deadline.
  void fail_over(PeerLoss how, const Deadline& deadline);
  // What the lost store said when tried again: it serves on and the rendezvous moved back to
  // it, its host is dead, or it is still gone (silent, or stepped down).
  enum class LostStore { kMovedBack, kDead, kGone };
  // Tries the lost store; moves back to it only once this node's votes elsewhere are void
  // (withdrawn, or their stores dead), or to a candidate that opened meanwhile.
  LostStore try_lost_store(const Succession& succession,
                           std::map<std::string, BallotRecord>& ballots,
                           const std::set<std::string>& dead);
  // Votes for one successor (store_takeover.hpp) and waits a while for it to open; true once
  // it is (the rendezvous then uses it). dead: successors this node found dead (counted out).
  bool vote_at(const Succession& succession, const Endpoint& candidate, bool host_dead,
               const std::set<std::string>& dead, BallotRecord& record, Clock::time_point lost_at);
  // A connection to the rendezvous keys of the store at `at` (succession).
  std::shared_ptr<Store> dial_rendezvous(const Endpoint& at);
  // RendezvousClosed once shutdown() ran (a signal while the store's successor is sought).
  void throw_if_shut_down();
  // The rendezvous uses store (at endpoint) from now on.
  void move_to(const Endpoint& endpoint, std::shared_ptr<Store> store);
  // Writes what the survivors know of the last round into a store that took over.
  void reseed(Store& store, const Succession& succession, const std::set<std::string>& dead);
  // This node hosts the store and heard nothing from most of its round: it steps down.
  void step_down(uint64_t round);
  // A store that stepped down opens no round (StoreError, silence).
  void throw_if_stepped_down() const;
  uint64_t start_round();
  void open_round(uint64_t round);
  // Moves current_round up to round (never back), in store_ or in store.
  void advance_current_round(uint64_t round);
  static void advance_current_round(uint64_t round, Store& store);
  // Waits for round to open. A spare waits as long as the job runs (join_timeout is for
  // joining a group that has room); others until deadline.
  void wait_admitted(uint64_t round, const Deadline& deadline, bool spare) const;
  // A spare let into round waits for the members of round - 1 first: until each of them is
  // out (re-joined, gone for good, or found silent) and every re-joining one took its place,
  // and then for the spares before it in the queue that still wait; or until last_call_timeout
  // passes (a member that has not noticed the change yet, a spare that died while waiting).
  // The survivors keep their places, and with them the training state; spares enter in the
  // order they came.
  void yield_to_members(uint64_t round);
  // Spares before this one in the queue that still wait (0 for the first, or a non-spare).
  [[nodiscard]] int64_t spares_ahead() const;
  // A newcomer about to ask the running group of round to re-form: with a spare watcher (an
  // agent that can start its workers first), says kJoining and waits for workers_ready(),
  // until deadline or a shutdown.
  void await_workers(uint64_t round, const Deadline& deadline);
  // The group is full: this node stands by for round (said once, reported to on_spare_).
  void stand_by(uint64_t round);
  void notify_spare(const SpareNotice& notice);
  // Returns once the round is closed and published (or throws on join/close timeouts).
  void wait_closed(uint64_t round, int64_t idx, const Deadline& deadline);
  bool try_claim(uint64_t round, int64_t count, int64_t idx);
  // After arrival idx in a re-formed round (member_back: a member of the previous round):
  // closes it at once when every node it expects (the previous round's members still in the
  // job, and its late arrivals) is in.
  void close_if_complete(uint64_t round, int64_t idx, bool member_back);
  // The node count to close re-formed round with when every node it expects is in; 0 when
  // not (or round is a first one, or the job shut down).
  int64_t complete_count(uint64_t round);
  Closing read_closing(uint64_t round, int64_t idx);
  // Reads the records, assigns ranks, writes every assignment and "closed" in one MULTI_SET.
  void publish_round(uint64_t round, int64_t count, int64_t closer);
  [[nodiscard]] RendezvousInfo make_info(uint64_t round, const NodeAssignment& a) const;
  // With options_.worker_store: group rank 0 hosts and publishes, every node reads it. False
  // when rank 0 did not publish within close_timeout (it died after the round closed).
  bool find_worker_store(RendezvousInfo& info);
  // The death witness saw group rank g of round die: ends its presence now (its lease), so the
  // others re-form at once instead of after the lease.
  void end_dead_presence(uint64_t round, int g);
  // This node serves a store the others need until they are out (the exit barrier).
  [[nodiscard]] bool serves_store(const RendezvousInfo& info) const;
  void throw_if_closed() const;
  // RendezvousClosed when the agent told this node to leave (spare_left_): "this node left
  // <when>".
  void throw_if_left(const std::string& when) const;
  // RendezvousClosed (or NotNeeded for a node that waited here and was never a member).
  [[noreturn]] void throw_closed() const;
  // " (the group re-formed because <reason>)" after a membership change, else "".
  [[nodiscard]] std::string after_change() const;
  void start_watcher(const RendezvousInfo& info);
  // Binds this node's presence to info's round (conn_mu_ held).
  void bind_presence(const RendezvousInfo& info);
  // One attempt: false when the store refused (presence_ reset, to be opened again).
  // last: the final attempt, whose failure is worth a warning (an earlier one is retried).
  bool try_bind_presence(const RendezvousInfo& info, bool last);
  void stop_watcher();
  // A new connection (prefixed) from connect_: each watcher thread blocks in its own.
  std::shared_ptr<Store> side_connection();
  void on_change(MembershipChange change, const ChangeReason& reason);
  // shutdown() and shutdown_after_failure().
  void leave(bool succeeded);
  // The store host leaves after its workers succeeded: tells whoever still runs (and waits
  // for them to have read it), so the store's going away is no failure of theirs.
  void announce_leaving(Store& store, const RendezvousInfo& info);
  // Sets "closed" and shuts the current and the next round, waking every waiter.
  void close_rendezvous(Store& store);
  // The store host's exit barrier: members of info's round, then of any newer round the
  // others re-formed into, until all are out, exit_barrier_timeout passes or interrupt().
  void wait_for_members(Store& store, const RendezvousInfo& info);
  // Blocks on key (interrupt() sets it to wake_value) with progress lines; false on timeout.
  bool wait_interruptible(Store& store, const std::string& key, const std::string& wake_value,
                          const Deadline& deadline, const std::function<std::string()>& what);

  DynamicRendezvousOptions options_;
  std::shared_ptr<Store> store_;  // prefixed with /ddp_rdzv/<run_id>
  // Where store_ is (endpoint_mu_: watcher and agent threads ask); what the last round told of
  // its members' standbys (nullopt before one).
  mutable std::mutex endpoint_mu_;
  Endpoint store_endpoint_;
  std::optional<Succession> succession_;
  bool fenced_seen_ = false;  // the store stepped down: its death later is no death of its host
  StoreConnector connect_;
  std::string node_id_;
  std::optional<uint64_t> last_round_;  // last round this node was a member of
  int prev_rank_ = -1;
  int last_info_size_ = 1;  // group size of last_round_
  // This node stands by as a spare now (set by the thread in next_rendezvous(), read by
  // leave()); it left while standing by (shutdown() from another thread: the job goes on).
  std::atomic<bool> standing_by_{false};
  std::atomic<bool> spare_left_{false};
  // This node's place in the queue of spares (0: it never stood by).
  int64_t spare_place_ = 0;
  // Says what became of this node's place in the queue ("admitted", "left"); best effort.
  void mark_spare_place(Store& store, const std::string& what) const;
  // It waited to be admitted at least once without being a member before (that thread only).
  bool waited_outside_ = false;

  // shutdown() may come from another thread while next_rendezvous() blocks on store_, so
  // it talks through a connection of its own; conn_mu_ guards these.
  std::mutex conn_mu_;
  std::shared_ptr<Store> control_store_;
  std::unique_ptr<RoundWatcher> watcher_;
  // This node's connection-bound records (store.hpp): when its agent dies, the store posts
  // "lost <group rank>" into the round's first change slot and deletes its "alive" key, so
  // the others re-form at once instead of after lease_timeout. Null where the store cannot.
  std::unique_ptr<Presence> presence_;
  bool presence_tried_ = false;
  // The previous round's watcher (with its own connections), told to stop but not joined:
  // re-joining must not wait up to a heartbeat interval for its threads to notice.
  std::unique_ptr<RoundWatcher> retiring_;
  bool shut_down_ = false;
  std::optional<RendezvousInfo> last_info_;  // the round the workers run in (exit barrier)

  // What the exit barrier waits on now, for interrupt() (from another thread).
  std::mutex wake_mu_;
  std::string wake_key_;
  std::string wake_value_;
  bool interrupted_ = false;

  mutable std::mutex mu_;  // guards the callbacks and the pending change
  std::function<void(MembershipChange)> on_change_;
  std::function<void(const SpareNotice&)> on_spare_;
  // workers_ready() since the last kJoining notice (guarded by mu_, waited on with ready_cv_).
  bool workers_ready_ = false;
  std::condition_variable ready_cv_;
  std::optional<MembershipChange> pending_;
  ChangeReason last_reason_;
};

}  // namespace ddp::rendezvous
