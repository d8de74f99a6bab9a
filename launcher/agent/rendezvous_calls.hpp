#pragma once
// The agent's blocking calls on its RendezvousHandler, each on a thread of its own so that the
// loop keeps serving signals, exits and timers meanwhile: joining a round (and connecting the
// job's store for it, which may wait seconds on a store that does not answer), asking whether
// the job can still restart, and leaving at the end (the store host's exit barrier). Each
// posts its result back to the loop; membership changes, heard on the handler's threads,
// arrive there too.
#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "launcher/agent/job_failure_link.hpp"
#include "rendezvous/failure_watch.hpp"
#include "rendezvous/rendezvous_handler.hpp"

namespace ddp::launcher {

class RendezvousCalls {
 public:
  RendezvousCalls(boost::asio::io_context& io, rendezvous::RendezvousHandler& rendezvous);
  ~RendezvousCalls();  // waits for every call's thread
  RendezvousCalls(const RendezvousCalls&) = delete;
  RendezvousCalls& operator=(const RendezvousCalls&) = delete;

  using OnRound = std::function<void(const rendezvous::RendezvousInfo&, JobConnections)>;
  // Why a join ended without a round.
  struct RoundError {
    std::string message;      // what failed (RendezvousClosed's text after a shutdown)
    bool not_needed = false;  // NotNeeded: the job ended while this node waited outside it
  };
  // Joins the next round and opens the job store's connections for it; on the loop, on_round
  // with both, or on_error.
  void join(OnRound on_round, std::function<void(const RoundError&)> on_error);
  // Spare notices (standing by, admitted), on the loop from now on.
  void watch_spare(std::function<void(const rendezvous::SpareNotice&)> on_spare);
  // Asks restart_blocker(); on the loop, on_answer with it ("" when nothing blocks a restart,
  // or when the store did not answer: the restart's rendezvous will say what is wrong then).
  void ask_restart_blocker(std::function<void(const std::string&)> on_answer);
  // Membership changes, on the loop from now on (the handler reports them on its threads).
  void watch(std::function<void(rendezvous::MembershipChange)> on_change);
  // Stops passing membership changes on.
  void unwatch();

  struct Leaving {
    bool succeeded = false;   // the exit barrier (shutdown), else shutdown_after_failure
    bool store_gone = false;  // nothing to leave: the store is gone
    // The attempt's failure watch: flushed first (a record published must be out before this
    // node leaves), read again after the barrier (null: none).
    std::unique_ptr<rendezvous::FailureWatch> watch;
  };
  // Leaves the rendezvous; on the loop, on_failure with a failure record found once the
  // barrier is over (a node that failed while this one waited), then on_left.
  void leave(Leaving leaving, std::function<void(const rendezvous::FailureRecord&)> on_failure,
             std::function<void()> on_left);

  // Waits for every call's thread (once the loop stopped).
  void join_threads();

 private:
  boost::asio::io_context& io_;
  rendezvous::RendezvousHandler& rendezvous_;
  std::thread round_thread_, check_thread_, exit_thread_;
};

}  // namespace ddp::launcher
