#pragma once
// One survivor's ballot at a successor's store (store_succession.hpp: who carries the store on
// when its host is lost). The vote lives in the candidate's own store, one linearizable
// register per key, so no consensus is written by hand beyond counting:
//
//   takeover/<r>/state             "open <e>" or "promoted <e>": the one key a promotion and a
//                                  withdrawal both compare-and-set, so they exclude each other
//   takeover/<r>/support/<e>/<g>   group rank g supports this candidate in epoch e ("1"), or
//                                  was proven dead before it did ("dead")
//   takeover/<r>/supporters/<e>    how many supported in epoch e
//   takeover/<r>/dead_voters/<e>   how many of those were proven dead since
//   takeover/<r>/dead/<g>          g proven dead (its standby refused, or it hosted the store
//                                  and its connection closed): who marked it first
//   takeover/<r>/dead_count        how many are proven dead
//   takeover/<r>/death             the lost store's host is proven dead
//   takeover/<r>/promoted          set after the promotion, for waiters to wake on
//
// A candidate is promoted when its live supporters are a strict majority of the last round's
// members not proven dead (may_take_over). A node votes at one candidate at a time, the first
// one in group-rank order it has not proven dead, and moves its vote on only when that one is
// proven dead; before it goes back to a lost store that answers again it withdraws its vote,
// which bumps the epoch and voids every vote of the old one. Why that is enough:
// docs/multinode.md, "When the store's host is lost".
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "rendezvous/store/store.hpp"

namespace ddp::rendezvous {

// What this node did at one candidate, kept across its connections to it.
struct BallotRecord {
  std::optional<uint64_t> voted_epoch;  // the epoch this node's support counts in
  std::set<int> marked_dead;            // group ranks this node counted out here
};

// The tally of the current epoch.
struct Tally {
  uint64_t epoch = 0;
  int supporters = 0;   // supported in this epoch...
  int dead_voters = 0;  // ...of whom proven dead since
  int dead = 0;         // members proven dead
  bool host_dead = false;
};

class TakeoverBallot {
 public:
  // store: the candidate's (prefixed) store; round and members: the last round closed;
  // self: this node's group rank in it.
  TakeoverBallot(Store& store, uint64_t round, int self, int members, BallotRecord& record);

  // True once the candidate is promoted (by anyone).
  bool promoted();
  // Supports the candidate in the current epoch (once), marks the host's death when proven and
  // counts out each group rank of dead (each once, whoever marks it first).
  void support(bool host_dead, const std::vector<int>& dead);
  [[nodiscard]] Tally tally();
  // Promotes the candidate when tally() allows it (may_take_over); true once promoted.
  bool try_promote(std::chrono::steady_clock::duration since_lost,
                   std::chrono::steady_clock::duration margin);
  // Voids this node's support (bumps the epoch) so it may go back to a lost store that answers
  // again. False when the candidate was promoted first: the node must move there instead.
  bool withdraw();
  // Blocks up to timeout for the promotion (StoreTimeout when none came).
  void wait_promoted(Duration timeout);

 private:
  struct State {
    bool promoted = false;
    uint64_t epoch = 0;
  };
  // The current state, opening the vote (epoch 0) when nobody has.
  State state();
  [[nodiscard]] std::string key(const std::string& name) const;
  [[nodiscard]] std::string in_epoch(const std::string& name, uint64_t epoch) const;
  void mark_dead(int g, uint64_t epoch);

  Store& store_;
  uint64_t round_;
  int self_;
  int members_;
  BallotRecord& record_;
};

}  // namespace ddp::rendezvous
