#include "launcher/agent/rendezvous_calls.hpp"

#include <boost/asio/post.hpp>
#include <exception>
#include <utility>

#include "common/error.hpp"
#include "common/log.hpp"

namespace ddp::launcher {
namespace asio = boost::asio;

namespace {

// How long a record this node published may take to reach the store before it leaves.
constexpr std::chrono::seconds kFlushBeforeLeaving{2};

// Starts fn on thread, after the call it replaces ended.
template <typename Fn>
void restart(std::thread& thread, Fn&& fn) {
  if (thread.joinable()) thread.join();
  thread = std::thread(std::forward<Fn>(fn));
}

}  // namespace

RendezvousCalls::RendezvousCalls(asio::io_context& io, rendezvous::RendezvousHandler& rendezvous)
    : io_(io), rendezvous_(rendezvous) {}

RendezvousCalls::~RendezvousCalls() {
  join_threads();
}

void RendezvousCalls::join_threads() {
  for (auto* thread : {&round_thread_, &check_thread_, &exit_thread_}) {
    if (thread->joinable()) thread->join();
  }
}

void RendezvousCalls::join(OnRound on_round, std::function<void(const RoundError&)> on_error) {
  restart(round_thread_, [this, on_round = std::move(on_round), on_error = std::move(on_error)] {
    try {
      auto info = rendezvous_.next_rendezvous();
      auto connections =
          connect_job([this] { return rendezvous_.connect_job_store(); }, info.group_world_size);
      asio::post(io_, [on_round, info, connections] { on_round(info, connections); });
    } catch (const rendezvous::NotNeeded& e) {
      asio::post(io_, [on_error, error = RoundError{e.what(), true}] { on_error(error); });
    } catch (const std::exception& e) {
      asio::post(io_, [on_error, error = RoundError{e.what(), false}] { on_error(error); });
    }
  });
}

void RendezvousCalls::watch_spare(std::function<void(const rendezvous::SpareNotice&)> on_spare) {
  rendezvous_.watch_spare(
      [this, on_spare = std::move(on_spare)](const rendezvous::SpareNotice& notice) {
        asio::post(io_, [on_spare, notice] { on_spare(notice); });
      });
}

void RendezvousCalls::ask_restart_blocker(std::function<void(const std::string&)> on_answer) {
  restart(check_thread_, [this, on_answer = std::move(on_answer)] {
    std::string blocker;
    try {
      blocker = rendezvous_.restart_blocker();
    } catch (const std::exception& e) {
      DDP_LOG_DEBUG(std::string("could not ask whether the job can restart: ") + e.what());
    }
    asio::post(io_, [on_answer, blocker] { on_answer(blocker); });
  });
}

void RendezvousCalls::watch(std::function<void(rendezvous::MembershipChange)> on_change) {
  rendezvous_.watch([this, on_change = std::move(on_change)](rendezvous::MembershipChange change) {
    asio::post(io_, [on_change, change] { on_change(change); });
  });
}

void RendezvousCalls::unwatch() {
  rendezvous_.watch([](rendezvous::MembershipChange) {});
}

void RendezvousCalls::leave(Leaving leaving,
                            std::function<void(const rendezvous::FailureRecord&)> on_failure,
                            std::function<void()> on_left) {
  restart(exit_thread_, [this, leaving = std::move(leaving), on_failure = std::move(on_failure),
                         on_left = std::move(on_left)] {
    if (leaving.watch) leaving.watch->flush(kFlushBeforeLeaving);
    if (leaving.store_gone) {
      // Nothing to leave (and reconnecting would only wait out a timeout).
    } else if (leaving.succeeded) {
      rendezvous_.shutdown();
      // The barrier is over, so every node that failed has recorded it; its record may still
      // be on its way to the watch, which must not lose the race to on_left.
      if (auto record = leaving.watch ? leaving.watch->read_record() : std::nullopt;
          record && record->is_failure()) {
        asio::post(io_, [on_failure, record = *record] { on_failure(record); });
      }
    } else {
      rendezvous_.shutdown_after_failure();
    }
    asio::post(io_, on_left);
  });
}

}  // namespace ddp::launcher
