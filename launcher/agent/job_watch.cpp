#include "launcher/agent/job_watch.hpp"

#include <boost/asio/post.hpp>

#include "common/log.hpp"
#include "common/peer_tolerance.hpp"
#include "launcher/output/event_names.hpp"

namespace ddp::launcher {
namespace {

// The job watch's own error says how the store was lost (silence or death); the rendezvous
// watcher's, which comes at about the same moment, waits this long for it.
constexpr std::chrono::milliseconds kStoreCauseWait{500};

}  // namespace

JobWatch::JobWatch(boost::asio::io_context& io, std::string host,
                   std::chrono::milliseconds tolerance, EventLog& events, Hooks hooks,
                   std::chrono::milliseconds record_wait)
    : io_(io),
      link_(std::move(host), tolerance),
      events_(events),
      hooks_(std::move(hooks)),
      cause_timer_(io),
      record_wait_(record_wait),
      record_timer_(io) {}

bool JobWatch::publish(rendezvous::FailureRecord record) {
  const std::string kind = record.kind;
  const int rank = record.rank;
  if (!link_.publish(std::move(record))) return false;
  events_.record(event::kFailurePublished, {{"kind", kind}, {"rank", rank}});
  return true;
}

void JobWatch::begin(const rendezvous::RendezvousInfo& round, JobConnections connections,
                     bool report_stalls) {
  const uint64_t epoch = ++epoch_;
  cause_timer_.cancel();
  settle();
  rendezvous::FailureWatchCallbacks callbacks;
  callbacks.on_failure = [this, epoch](const rendezvous::FailureRecord& record) {
    boost::asio::post(io_, [this, epoch, record] { on_record(epoch, record); });
  };
  callbacks.on_store_lost = [this, epoch](const std::string& message, PeerLoss loss) {
    boost::asio::post(io_, [this, epoch, message, loss] { on_lost(epoch, message, loss); });
  };
  if (report_stalls) {
    // No heartbeats to name a silent peer, but a stalled WAIT slice shows the store was.
    callbacks.on_store_stall = [store =
                                    round.master_addr + ":" +
                                    std::to_string(round.master_port)](rendezvous::Duration late) {
      const rendezvous::Duration tenths((late.count() + 50) / 100 * 100);
      DDP_LOG_WARN("the store at " + store + " was silent for at least " + tolerance_text(tenths) +
                   " and came back (a network blip, or this node was paused); the workers ran on");
    };
  }
  if (!connections.error.empty()) {
    DDP_LOG_WARN("this node cannot watch the job's failure record (" + connections.error +
                 "): failures elsewhere reach it through its rendezvous only");
  }
  link_.begin(round, std::move(connections), std::move(callbacks));
}

void JobWatch::await_record(std::function<void()> on_timeout) {
  awaiting_record_ = true;
  record_timer_.expires_after(record_wait_);
  record_timer_.async_wait(
      [this, on_timeout = std::move(on_timeout)](boost::system::error_code ec) {
        if (ec || !awaiting_record_) return;
        awaiting_record_ = false;
        DDP_LOG_WARN("the job-wide failure record did not arrive; deciding from this node alone");
        on_timeout();
      });
}

bool JobWatch::settle() {
  if (!awaiting_record_) return false;
  awaiting_record_ = false;
  record_timer_.cancel();
  return true;
}

void JobWatch::hear(const rendezvous::FailureRecord& record) {
  on_record(epoch_, record);
}

void JobWatch::on_record(uint64_t epoch, const rendezvous::FailureRecord& record) {
  if (epoch != epoch_ || link_.failure()) return;
  if (!record.is_failure()) {
    if (link_.is_self(record)) return;  // this node's own announcement: it is the one leaving
    store_leaving_ = true;
    store_gone_ = true;  // its exit barrier is over: there is nothing left to leave
    events_.record(event::kStoreLeaving, {{"node", record.group_rank}});
    DDP_LOG_WARN("node " + std::to_string(record.group_rank) + " (" + record.host +
                 "), which hosts the store, finished and is leaving; this node's workers run "
                 "on, but failures are no longer shared between nodes");
    hooks_.on_store_leaving();
    return;
  }
  link_.hold(record);
  events_.record(event::kJobFailure, {{"kind", record.kind},
                                      {"node", record.group_rank},
                                      {"rank", record.rank},
                                      {"exit_code", record.exit_code},
                                      {"signal", record.signal},
                                      {"mine", link_.is_mine(record)}});
  hooks_.on_failure(record);
}

void JobWatch::rendezvous_lost_store(const std::string& message, PeerLoss loss) {
  if (!link_.watching()) {
    on_lost(epoch_, message, loss);
    return;
  }
  // The watch's connection fails the same way at about the same moment, and its error says
  // how; a death still reaches it at once, so this adds nothing to one.
  cause_timer_.expires_after(kStoreCauseWait);
  cause_timer_.async_wait([this, epoch = epoch_, message, loss](boost::system::error_code ec) {
    if (!ec) on_lost(epoch, message, loss);
  });
}

void JobWatch::on_lost(uint64_t epoch, const std::string& message, PeerLoss loss) {
  if (epoch != epoch_ || link_.failure() || store_leaving_) return;
  cause_timer_.cancel();
  hooks_.on_store_lost(message, loss);
}

void JobWatch::stop() {
  ++epoch_;
  cause_timer_.cancel();
  link_.stop();
}

std::unique_ptr<rendezvous::FailureWatch> JobWatch::release(bool keep_watching) {
  cause_timer_.cancel();
  settle();
  if (!keep_watching) ++epoch_;
  return link_.release(keep_watching);
}

}  // namespace ddp::launcher
