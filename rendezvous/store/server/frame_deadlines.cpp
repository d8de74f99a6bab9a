#include "rendezvous/store/server/frame_deadlines.hpp"

#include <algorithm>
#include <memory>
#include <vector>

#include "rendezvous/store/server/store_session.hpp"

namespace ddp::rendezvous {

size_t FrameDeadlines::sweep(Clock::time_point now) {
  std::vector<std::shared_ptr<StoreSession>> expired;
  for (const auto& [session, since] : open_) {
    // In milliseconds: a timeout near INT64_MAX ms ("never") overflows nanoseconds.
    if (since == Clock::time_point::min() ||
        std::chrono::duration_cast<std::chrono::milliseconds>(now - since) >= timeout_) {
      expired.push_back(session->shared_from_this());
    }
  }
  // Closing erases from open_, so it happens after the walk.
  for (const auto& session : expired) session->frame_timed_out(timeout_);
  return expired.size();
}

std::chrono::milliseconds FrameDeadlines::period() const {
  return std::clamp(timeout_ / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
}

}  // namespace ddp::rendezvous
