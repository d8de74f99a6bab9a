#pragma once
// Who carries the rendezvous store on when the node hosting it is lost (docs/multinode.md,
// "When the store's host is lost"). Every agent of an elastic job keeps a standby store,
// empty and listening, whose address it publishes with each round; the store of the job is the
// successor the survivors vote for (store_takeover.hpp), in the candidates' own stores:
//  - a candidate opens for the job when its live supporters are a strict majority of the last
//    round's members not proven dead; a death (a connection closed, reset or refused) is
//    certain and counts the dead out, so a 2-node job whose host died goes on with the
//    survivor, while silence proves nothing and counts nobody out;
//  - a node votes for the first candidate in group-rank order it has not proven dead, moves
//    its vote on only when that one is proven dead, and withdraws it before going back to a
//    lost store that answers again;
//  - after silence, a candidate opens only a margin after the survivor lost the store, and the
//    store's host, when it hears from no majority of its round, stops serving first (its own
//    rule, quorum_lost()); ties stay with the host.
// So two halves of one job never both have a store: two disjoint groups cannot both be a
// strict majority of the living, and a host without one stops before the others move.
#include <chrono>
#include <string>
#include <vector>

#include "rendezvous/rdzv_conf.hpp"

namespace ddp::rendezvous {

// The standby stores of a round's members, by group rank ("" host: that node has none).
std::string format_standbys(const std::vector<Endpoint>& standbys);
// Inverse of format_standbys; ProtocolError naming the text when a line does not parse.
std::vector<Endpoint> parse_standbys(const std::string& text);

// What the survivors know of the last round when its store is lost.
struct Succession {
  uint64_t round = 0;              // the last round closed
  int members = 0;                 // its group size
  int self = -1;                   // this node's group rank in it
  std::vector<Endpoint> standbys;  // by group rank
  Endpoint store;                  // where its store was
};

// The successors to try, best first: every member's standby that is not the lost store's
// (the host's own entry is its store), in group-rank order.
std::vector<Endpoint> successors(const Succession& succession);

// Whether a candidate may open for the job: its live supporters (supporters not proven dead
// since) are a strict majority of the electorate (the last round's members not proven dead),
// and, unless the lost store's host is proven dead, margin has passed since this survivor lost
// the store (time for the host to have stepped down).
bool may_take_over(int live_supporters, int electorate, bool host_dead,
                   std::chrono::steady_clock::duration since_lost,
                   std::chrono::steady_clock::duration margin);

// The store's host (this node) keeps serving while the nodes of its round that may still be
// alive elsewhere, the silent ones, are no strict majority; silent of members: ties stay.
bool quorum_lost(int silent, int members);

}  // namespace ddp::rendezvous
