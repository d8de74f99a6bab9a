#include "rendezvous/membership_claims.hpp"

#include <limits>
#include <string_view>

#include "common/parse_int.hpp"
#include "rendezvous/round_keys.hpp"

namespace ddp::rendezvous {

ChangeClaim parse_change(const std::string& value) {
  ChangeClaim claim;
  if (value == "waiting") {
    claim.kind = ChangeClaim::Kind::kWaiting;
  } else if (value == "rejoin") {
    claim.kind = ChangeClaim::Kind::kRejoin;
  } else if (value == "stepped_down") {
    claim.kind = ChangeClaim::Kind::kSteppedDown;
  } else if (value.rfind("lost ", 0) == 0) {
    if (auto rank =
            try_parse_int(std::string_view(value).substr(5), 0, std::numeric_limits<int>::max())) {
      claim.rank = static_cast<int>(*rank);
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
