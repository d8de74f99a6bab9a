#pragma once
// How the agent leaves once its workers are gone. A record this node published goes out
// first (leaving would take it along); the rendezvous is left off the loop, since the store
// host may wait in the exit barrier for the other nodes and signals must still be served; a
// failure record heard meanwhile may make the job's failure this node's exit status; then the
// finish event, and the loop stops.
#include <boost/asio/io_context.hpp>
#include <functional>
#include <string>

#include "launcher/agent/agent_options.hpp"
#include "launcher/agent/in_place_recovery.hpp"
#include "launcher/agent/job_watch.hpp"
#include "launcher/agent/rendezvous_calls.hpp"
#include "launcher/agent/signal_watch.hpp"
#include "launcher/output/event_log.hpp"

namespace ddp::launcher {

class Departure {
 public:
  Departure(boost::asio::io_context& io, const AgentOptions& options, RendezvousCalls& calls,
            JobWatch& job, const InPlaceRecovery& recovery, SignalWatch& signals, EventLog& events);

  // Leaves with exit_status after restarts_spent restarts; on_left on the loop, just before
  // it stops. After success the failure watch goes on through the exit barrier.
  void leave(int exit_status, int restarts_spent, std::function<void()> on_left);
  // A failure record heard while leaving after the workers succeeded: unless final is false
  // (an elastic job with a restart left goes on without this node), the exit says it.
  void heard_failure(const rendezvous::FailureRecord& record, bool final);
  // A signal while leaving (the first the agent received): the exit is 128 + sig.
  void signalled(int sig) { exit_status_ = 128 + sig; }
  // Writes text (whole lines: the failure summary) to the notice console, else to notice_fd.
  void emit(const std::string& text) const;

  [[nodiscard]] int exit_status() const { return exit_status_; }

 private:
  boost::asio::io_context& io_;
  const AgentOptions& options_;
  RendezvousCalls& calls_;
  JobWatch& job_;
  const InPlaceRecovery& recovery_;
  SignalWatch& signals_;
  EventLog& events_;
  int exit_status_ = 0;
};

}  // namespace ddp::launcher
