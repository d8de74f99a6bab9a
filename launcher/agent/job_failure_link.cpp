#include "launcher/agent/job_failure_link.hpp"

namespace ddp::launcher {

JobConnections connect_job(const rendezvous::StoreConnector& connect, int group_world_size) {
  JobConnections connections;
  if (group_world_size <= 1) return connections;
  try {
    connections.wait = connect();
    if (connections.wait) connections.publish = connect();
  } catch (const StoreError& e) {
    connections = JobConnections{};
    connections.error = e.what();
    connections.loss = e.loss();
  } catch (const std::exception& e) {
    connections = JobConnections{};
    connections.error = e.what();
  }
  return connections;
}

JobFailureLink::JobFailureLink(std::string host, std::chrono::milliseconds tolerance)
    : host_(std::move(host)), tolerance_(tolerance) {}

JobFailureLink::~JobFailureLink() {
  stop();
}

void JobFailureLink::begin(const rendezvous::RendezvousInfo& round, JobConnections connections,
                           rendezvous::FailureWatchCallbacks callbacks) {
  watch_.reset();
  failure_.reset();
  published_ = false;
  attempt_ = round.round;
  group_rank_ = round.group_rank;
  if (round.group_world_size <= 1 || !connections.wait) return;
  watch_ = std::make_unique<rendezvous::FailureWatch>(
      std::move(connections.wait), std::move(connections.publish), round.round, round.group_rank,
      std::move(callbacks), std::chrono::milliseconds(2000), tolerance_);
}

bool JobFailureLink::publish(rendezvous::FailureRecord record) {
  if (!watch_ || published_ || failure_) return false;
  published_ = true;
  record.attempt = attempt_;
  record.group_rank = group_rank_;
  record.host = host_;
  if (record.time == 0) record.time = rendezvous::unix_now();
  watch_->publish(std::move(record));
  return true;
}

void JobFailureLink::stop() {
  if (auto watch = std::move(watch_)) watch->stop();
}

std::unique_ptr<rendezvous::FailureWatch> JobFailureLink::release(bool keep_watching) {
  auto watch = std::move(watch_);
  if (watch && !keep_watching) watch->stop();
  return watch;
}

bool JobFailureLink::is_mine(const rendezvous::FailureRecord& record) const {
  return published_ && record.group_rank == group_rank_ && record.host == host_;
}

}  // namespace ddp::launcher
