#pragma once
// The membership changes of one running round of the dynamic rendezvous, as a short chain
// of write-once slots ("r<r>/changed", "r<r>/changed/2", ...). Anyone who can reach the
// store can write a slot, so members check each claim against the store's own view before
// they act on it (a "lost" node that still heartbeats is not lost; a "waiting" node must
// have arrived; a "rejoin" must have opened the next round). A refuted claim is marked
// "refuted <claim>" and the members listen to the next slot; after kMaxChangeSlots slots
// they stop listening to claims (losses their own monitor sees still count).
#include <cstdint>
#include <optional>
#include <string>

#include "rendezvous/store/store.hpp"

namespace ddp::rendezvous {

inline constexpr int kMaxChangeSlots = 8;
inline const std::string kRefutedPrefix = "refuted ";

// What one slot claims.
struct ChangeClaim {
  // kSteppedDown: the store's host stepped down (it heard nothing from most of its round).
  enum class Kind { kWaiting, kRejoin, kLost, kSteppedDown, kInvalid };
  Kind kind = Kind::kInvalid;
  int rank = -1;  // the lost group rank (kLost)
};

// Parses "waiting", "rejoin", "lost <group_rank>", "stepped_down"; anything else is kInvalid.
ChangeClaim parse_change(const std::string& value);

// Writes value into the first slot that is free, skipping refuted ones; does nothing when a
// slot holds a live claim (the round is re-forming already) or every slot is used. Returns
// the slot written, or nullopt.
std::optional<int> post_change(Store& store, uint64_t round, const std::string& value);

// Marks slot's claim as refuted so posters skip it (first refuter wins; the rest no-op).
void refute_change(Store& store, uint64_t round, int slot, const std::string& value);

}  // namespace ddp::rendezvous
