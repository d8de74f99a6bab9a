#pragma once
// The bytes of requests still arriving, summed over every connection of one server, against
// one budget (ServerLimits::max_bytes): many connections each sending most of a large
// request at once cannot make the server buffer more than the store itself may hold.
// Single-threaded, as the sessions that charge it.
#include <cstddef>

namespace ddp::rendezvous {

class InputBudget {
 public:
  explicit InputBudget(size_t max_bytes) : max_bytes_(max_bytes) {}

  // A session's buffered input went from `before` to `after` bytes; false when that growth
  // takes the total past the budget (the caller closes the session, which releases them).
  bool charge(size_t before, size_t after) {
    held_ = held_ - before + after;
    return after <= before || held_ <= max_bytes_;
  }
  [[nodiscard]] size_t held() const { return held_; }
  [[nodiscard]] size_t max_bytes() const { return max_bytes_; }

 private:
  size_t max_bytes_;
  size_t held_ = 0;
};

}  // namespace ddp::rendezvous
