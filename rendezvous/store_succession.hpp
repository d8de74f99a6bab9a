#pragma once
// Who carries the rendezvous store on when the node hosting it is lost (docs/multinode.md,
// "When the store's host is lost"). Every agent of an elastic job keeps a standby store,
// empty and listening, whose address it publishes with each round; the store of the job is the
// one the survivors agree to move to: the lowest group rank of the last round whose standby
// answers. Agreement needs nothing written by hand beyond two rules:
//  - a death is certain (the host's connection closed, reset or refused): the dead cannot
//    serve, so the survivors move at once, however many they are;
//  - silence proves nothing: the survivors move only when a strict majority of the last
//    round's nodes says so, and not before the store's host, seeing that it hears from no
//    majority, has stopped serving (its own rule, quorum_lost()); ties stay with the host.
// So two halves of one job never both have a store: a majority is unique, and a host without
// one stops before the others move.
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

// Whether a survivor may open the successor's store for the job: at once after a death seen
// by any supporter; after silence, only with a strict majority of members supporting and
// margin past the moment this survivor lost the store (time for the host to have stopped).
bool may_take_over(int supporters, bool death_seen, int members,
                   std::chrono::steady_clock::duration since_lost,
                   std::chrono::steady_clock::duration margin);

// The store's host (this node) keeps serving while the nodes of its round that may still be
// alive elsewhere, the silent ones, are no strict majority; silent of members: ties stay.
bool quorum_lost(int silent, int members);

}  // namespace ddp::rendezvous
