#include "rendezvous/membership_claims.hpp"

#include <charconv>

#include "rendezvous/round_keys.hpp"

namespace ddp::rendezvous {

ChangeClaim parse_change(const std::string& value) {
  ChangeClaim claim;
  if (value == "waiting") {
    claim.kind = ChangeClaim::Kind::kWaiting;
  } else if (value == "rejoin") {
    claim.kind = ChangeClaim::Kind::kRejoin;
  } else if (value.rfind("lost ", 0) == 0) {
    const char* first = value.data() + 5;
    const char* last = value.data() + value.size();
    auto [ptr, ec] = std::from_chars(first, last, claim.rank);
    if (ec == std::errc() && ptr == last && ptr != first && claim.rank >= 0) {
      claim.kind = ChangeClaim::Kind::kLost;
    }
  }
  return claim;
}

std::optional<int> post_change(Store& store, uint64_t round, const std::string& value) {
  for (int slot = 1; slot <= kMaxChangeSlots; ++slot) {
    const std::string now = store.compare_set(rdzv_keys::changed(round, slot), "", value);
    if (now == value) return slot;
    if (now.rfind(kRefutedPrefix, 0) != 0) return std::nullopt;  // a live claim: re-forming
  }
  return std::nullopt;
}

void refute_change(Store& store, uint64_t round, int slot, const std::string& value) {
  store.compare_set(rdzv_keys::changed(round, slot), value, kRefutedPrefix + value);
}

}  // namespace ddp::rendezvous
