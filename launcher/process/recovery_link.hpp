#pragma once
// One worker's in-place recovery channel, agent side (common/recovery_protocol.hpp): a Unix
// stream socketpair made before the worker is spawned. The worker inherits one end as
// descriptor 3; the agent reads and writes the other on its io_context, never blocking it.
// A socketpair, not a path: no name to clean up or to guard, and the agent knows which worker
// each end belongs to.
#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <string>

#include "common/recovery_protocol.hpp"

namespace ddp::launcher {

class RecoveryLink {
 public:
  // Called on io's thread for every good line; a bad line is logged and ignored.
  using MessageHandler = std::function<void(const recovery::Message&)>;

  // Makes the pair (ddp::Error naming errno when it cannot) and starts reading on io.
  RecoveryLink(boost::asio::io_context& io, MessageHandler on_message);
  // Closes the agent's end: the worker reads end-of-file. No handler runs afterwards.
  ~RecoveryLink();
  RecoveryLink(const RecoveryLink&) = delete;
  RecoveryLink& operator=(const RecoveryLink&) = delete;

  // The worker's end, to hand to the spawner; close_child_end() once the worker has it.
  [[nodiscard]] int child_fd() const { return child_fd_; }
  void close_child_end();
  // Queues one line (written in order, in the background). A worker that is gone, or not
  // reading, loses it: the agent's timers decide what its silence means.
  void send(const recovery::Message& message);

 private:
  struct State;
  std::shared_ptr<State> state_;
  int child_fd_ = -1;
};

}  // namespace ddp::launcher
