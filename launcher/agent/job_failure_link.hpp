#pragma once
// This node's link to the job-wide failure record of the current attempt (multi-node only;
// docs/multinode.md, "When a node fails"): it publishes this node's failure (once per attempt;
// the first record of the attempt wins, whichever node wrote it) and watches for the record
// that holds, another node's or its own. It knows no agent state: the agent decides what a
// record means; the link keeps what it published and what arrived.
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "rendezvous/failure_watch.hpp"
#include "rendezvous/rendezvous_handler.hpp"

namespace ddp::launcher {

// The two connections a job's failure watch needs (a WAIT blocks one), or why they could not
// be opened.
struct JobConnections {
  std::shared_ptr<rendezvous::Store> wait;
  std::shared_ptr<rendezvous::Store> publish;
  std::string error;  // set when connecting failed: the store's own error
  PeerLoss loss = PeerLoss::kUnknown;
};

// Opens them with connect (RendezvousHandler::connect_job_store): off the agent's loop, since
// a store that does not answer holds a connect for seconds. None for a group of one node, or
// where connect gives no store.
JobConnections connect_job(const rendezvous::StoreConnector& connect, int group_world_size);

class JobFailureLink {
 public:
  // host: the address the other nodes know this node by (--local_addr), else its name; it goes
  // into every record this node publishes, and tells this node's records from others'.
  // tolerance: how long the store may go unheard before the watch reports it lost.
  JobFailureLink(std::string host, std::chrono::milliseconds tolerance);
  ~JobFailureLink();
  JobFailureLink(const JobFailureLink&) = delete;
  JobFailureLink& operator=(const JobFailureLink&) = delete;

  // Forgets the last attempt and watches the record of round's attempt: the watch waits on
  // connections.wait and publishes on connections.publish (opened off the agent's loop,
  // connect_job). Nothing to watch on one node (its failures are the job's) or without
  // connections. callbacks run on the watch's thread, at most one of them once.
  void begin(const rendezvous::RendezvousInfo& round, JobConnections connections,
             rendezvous::FailureWatchCallbacks callbacks);
  // Publishes record as this node's failure of the attempt (attempt, node, host and time filled
  // in): only while watching, once per attempt, and only while no record is known. False when
  // nothing was published.
  bool publish(rendezvous::FailureRecord record);
  // The agent heard record (from the callback, on its own loop): the attempt's record from now on.
  void hold(const rendezvous::FailureRecord& record) { failure_ = record; }
  // Stops watching (no callback runs once this returns); what was published and heard is kept.
  void stop();
  // Hands the watch over, so that the caller can flush its publishing (FailureWatch::flush) off
  // the loop before the agent exits; null when none. It stops watching unless keep_watching (a
  // node whose workers succeeded still hears a failure elsewhere during its exit barrier).
  std::unique_ptr<rendezvous::FailureWatch> release(bool keep_watching = false);

  [[nodiscard]] bool watching() const { return watch_ != nullptr; }
  [[nodiscard]] bool published() const { return published_; }
  // The attempt's record, once heard.
  [[nodiscard]] const std::optional<rendezvous::FailureRecord>& failure() const { return failure_; }
  // True when record is the one this node published (its node and host).
  [[nodiscard]] bool is_mine(const rendezvous::FailureRecord& record) const;
  // True when record names this node (its node and host), published or not (a store host's
  // own announcement that it leaves).
  [[nodiscard]] bool is_self(const rendezvous::FailureRecord& record) const {
    return record.group_rank == group_rank_ && record.host == host_;
  }

 private:
  std::string host_;
  std::chrono::milliseconds tolerance_;
  uint64_t attempt_ = 0;
  int group_rank_ = -1;
  std::unique_ptr<rendezvous::FailureWatch> watch_;
  std::optional<rendezvous::FailureRecord> failure_;
  bool published_ = false;
};

}  // namespace ddp::launcher
