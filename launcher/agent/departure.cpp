#include "launcher/agent/departure.hpp"

#include <unistd.h>

#include "common/log.hpp"
#include "launcher/agent/agent_events.hpp"
#include "launcher/output/event_names.hpp"

namespace ddp::launcher {

Departure::Departure(boost::asio::io_context& io, const AgentOptions& options,
                     RendezvousCalls& calls, JobWatch& job, const InPlaceRecovery& recovery,
                     SignalWatch& signals, EventLog& events)
    : io_(io),
      options_(options),
      calls_(calls),
      job_(job),
      recovery_(recovery),
      signals_(signals),
      events_(events) {}

void Departure::leave(int exit_status, int restarts_spent, std::function<void()> on_left) {
  exit_status_ = exit_status;
  RendezvousCalls::Leaving leaving;
  leaving.succeeded = exit_status == 0;
  leaving.store_gone = job_.store_gone();
  // A failure elsewhere while this node waits in the exit barrier is the job's, and this
  // node's exit says so (heard_failure).
  leaving.watch = job_.release(/*keep_watching=*/exit_status == 0);
  calls_.unwatch();
  calls_.leave(
      std::move(leaving), [this](const rendezvous::FailureRecord& record) { job_.hear(record); },
      [this, restarts_spent, on_left = std::move(on_left)] {
        on_left();
        if (const std::string summary = recovery_.summary(); !summary.empty()) {
          DDP_LOG_INFO(summary);
        }
        events_.record(event::kFinish,
                       {{"exit_code", exit_status_}, {"restarts_spent", restarts_spent}});
        signals_.stop();
        io_.stop();
      });
}

void Departure::heard_failure(const rendezvous::FailureRecord& record, bool final) {
  if (exit_status_ != 0 || !final) return;
  exit_status_ = record.shell_status();
  report_failed_after_finish(record, exit_status_);
}

void Departure::emit(const std::string& text) const {
  if (options_.notice_console != nullptr) {
    options_.notice_console->write(text);
    return;
  }
  ssize_t ignored = ::write(options_.notice_fd, text.data(), text.size());
  (void)ignored;
}

}  // namespace ddp::launcher
