#pragma once
// Key names of the dynamic rendezvous, relative to its "/ddp_rdzv/<run_id>" prefix.
// Every per-round key carries the round number, so a round's keys are written once and
// never rewritten by every node (no shared blob).
#include <cstdint>
#include <string>

namespace ddp::rendezvous::rdzv_keys {

// Set once when the job ends; late nodes exit instead of waiting.
inline const std::string kClosed = "closed";
// Set by the store's host when it steps down (it heard nothing from most of its round): the
// store opens no round any more, and its members move to a successor.
inline const std::string kSteppedDown = "stepped_down";
// A store that takes the rendezvous over after the last round r's store was lost
// (store_succession.hpp): each survivor's support ("death" or "silence", by group rank), how
// many supported, whether any saw a death, and "promoted" once the store opens for the job.
inline std::string takeover(uint64_t round, const std::string& name) {
  return "takeover/" + std::to_string(round) + "/" + name;
}
// Highest round opened so far (decimal); fresh nodes start there.
inline const std::string kCurrentRound = "current_round";
// ADD counter: each spare's place in the queue of spares (1-based, in the order they first
// stood by); "spare/<n>" says whether spare n still waits ("waiting"), got in ("admitted") or
// left ("left"). Spares enter re-opened rounds in that order.
inline const std::string kSpareQueue = "spare_queue";
inline std::string spare(int64_t place) {
  return "spare/" + std::to_string(place);
}

inline std::string round_key(uint64_t round, const std::string& name) {
  return "r" + std::to_string(round) + "/" + name;
}
// ADD counter: arrival index of each node (1-based).
inline std::string arrived(uint64_t round) {
  return round_key(round, "arrived");
}
// Set by the MIN-th arrival: starts everybody's last-call window.
inline std::string min_reached(uint64_t round) {
  return round_key(round, "min_reached");
}
// "<count> <closer_idx>" of the node that won the right to close the round (COMPARE_SET).
inline std::string closing(uint64_t round) {
  return round_key(round, "closing");
}
// The same value, written with every assignment in one MULTI_SET once the round is
// published ("-1 0": the rendezvous was shut down).
inline std::string closed(uint64_t round) {
  return round_key(round, "closed");
}
// Set by a member of round-1 when it re-joins; late nodes wait for it.
inline std::string opened(uint64_t round) {
  return round_key(round, "open");
}
// Membership changes of a running round, one write-once slot each (slot 1 is "changed",
// later ones "changed/<slot>"): "waiting", "rejoin" or "lost <group_rank>", or the same text
// after "refuted " once the members found the claim false (see membership_claims.hpp).
inline std::string changed(uint64_t round, int slot = 1) {
  return slot <= 1 ? round_key(round, "changed")
                   : round_key(round, "changed/" + std::to_string(slot));
}
// Set by the first member whose workers all succeeded: the round is finishing, so a late
// node no longer makes it re-form.
inline std::string finished(uint64_t round) {
  return round_key(round, "finished");
}
// The round's exit barrier (exit_barrier.hpp): an ADD counter of members counted out,
// "<key>/out/<group_rank>" saying why each left ("<why> <writer token>", why being finished,
// failed, rejoined, lost or disconnected), "<key>/gone" counting those gone for good, and
// "<key>/all" set by the last one.
inline std::string departed(uint64_t round) {
  return round_key(round, "departed");
}
// Number of members of the round (written with "closed"), for agents that are not members.
inline std::string size(uint64_t round) {
  return round_key(round, "size");
}
// Where arrival idx's standby store listens ("host:port", "" for none).
inline std::string standby(uint64_t round, int64_t idx) {
  return round_key(round, "standby/" + std::to_string(idx));
}
// Every member's standby, by group rank (store_succession.hpp's format_standbys), written by
// the closing node with "closed".
inline std::string standbys(uint64_t round) {
  return round_key(round, "standbys");
}
// The record of arrival idx (NodeRecord), empty when that node withdrew.
inline std::string node(uint64_t round, int64_t idx) {
  return round_key(round, "node/" + std::to_string(idx));
}
// The assignment of arrival idx (NodeAssignment), written by the closing node.
inline std::string assign(uint64_t round, int64_t idx) {
  return round_key(round, "assign/" + std::to_string(idx));
}
// Arrivals of a re-formed round (ADD counters): members of the previous round coming back,
// and the others (nodes that arrived there too late, or fresh ones). When both reach what
// the previous round leads to expect, the round closes at once instead of after its last call.
inline std::string rejoined(uint64_t round) {
  return round_key(round, "rejoined");
}
inline std::string newcomers(uint64_t round) {
  return round_key(round, "newcomers");
}
// Group rank g holds a presence (store.hpp) in this round: "bound/<g>" is set for good,
// "alive/<g>" is an ephemeral key the store deletes when g's connection drops.
inline std::string bound(uint64_t round, int group_rank) {
  return round_key(round, "bound/" + std::to_string(group_rank));
}
inline std::string alive(uint64_t round, int group_rank) {
  return round_key(round, "alive/" + std::to_string(group_rank));
}
// What ends group rank g's presence from elsewhere (Presence::token(): etcd's lease id), for
// the death witness (worker_store_host.hpp).
inline std::string presence_token(uint64_t round, int group_rank) {
  return round_key(round, "token/" + std::to_string(group_rank));
}
// Where the round's workers find their TCP store, "host:port", when group rank 0 hosts it
// (worker_store_host.hpp; the etcd backend).
inline std::string worker_store(uint64_t round) {
  return round_key(round, "worker_store");
}
// Heartbeat tick t of group rank g, and the latest tick g wrote.
inline std::string heartbeat(uint64_t round, int group_rank, uint64_t tick) {
  return round_key(round, "hb/" + std::to_string(group_rank) + "/" + std::to_string(tick));
}
inline std::string heartbeat_latest(uint64_t round, int group_rank) {
  return round_key(round, "hb/" + std::to_string(group_rank) + "/latest");
}

}  // namespace ddp::rendezvous::rdzv_keys
