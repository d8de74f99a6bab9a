#pragma once
// Pure part of the dynamic rendezvous: what each node publishes when it arrives in a round,
// and how the closing node turns the arrivals into group ranks and RANK offsets.
// No store, no threads: unit-tested on tables.
#include <optional>
#include <string>
#include <vector>

namespace ddp::rendezvous {

// What a node writes under its arrival slot ("r<round>/node/<idx>").
struct NodeRecord {
  int nproc = 1;        // LOCAL_WORLD_SIZE of this node
  int prev_rank = -1;   // group rank in the last round this node was part of (-1: none)
  std::string node_id;  // unique per agent process: "<addr>:<pid>:<random>"
};

// What the closing node hands back to each member ("r<round>/assign/<idx>").
struct NodeAssignment {
  int group_rank = 0;
  int group_world_size = 1;
  int rank_offset = 0;  // sum of nproc over lower group ranks
  int world_size = 0;   // sum of nproc over every member
  // Digest of the members' node ids (16 hex digits): equal digests in two rounds mean the
  // group re-formed with the same nodes.
  std::string members;
};

// A new id for one agent: "<addr or 'node'>:<pid>:<8 random hex digits>".
std::string make_node_id(const std::string& addr);

// "<nproc> <prev_rank> <node_id>"; node_id may contain spaces.
std::string format_record(const NodeRecord& record);
// Inverse of format_record; throws ProtocolError naming the text when it does not parse.
NodeRecord parse_record(const std::string& text);

// "<group_rank> <group_world_size> <rank_offset> <world_size> <members>".
std::string format_assignment(const NodeAssignment& assignment);
// Inverse of format_assignment; throws ProtocolError naming the text when it does not parse.
NodeAssignment parse_assignment(const std::string& text);

// Ranks for the members of a round, given in arrival order (nullopt: a slot whose node
// withdrew or never wrote its record; it gets nullopt back). A member keeps its prev_rank
// when that rank is below the new group size and no earlier arrival claimed it; the others
// take the free ranks in arrival order. Offsets are prefix sums of nproc in group-rank order.
std::vector<std::optional<NodeAssignment>> assign_ranks(
    const std::vector<std::optional<NodeRecord>>& arrivals);

}  // namespace ddp::rendezvous
