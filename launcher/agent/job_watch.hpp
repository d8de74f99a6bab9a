#pragma once
// The job's record and store as this node's loop sees them (docs/multinode.md, "When a node
// fails"). JobFailureLink watches the attempt's failure record on threads of its own; this
// brings what it hears onto the agent's loop, drops what is stale (a record of an attempt
// left behind, a re-form in place), tells a store host that leaves from a store that is lost,
// and holds the rendezvous watcher's report of a lost store back for a moment so the watch's
// own error (which says silence or death) comes first. The agent decides what each means.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "launcher/agent/job_failure_link.hpp"
#include "launcher/output/event_log.hpp"

namespace ddp::launcher {

class JobWatch {
 public:
  // Called on the loop, for the current attempt only.
  struct Hooks {
    // The attempt's record, a failure on some node (this one's included): held from now on.
    std::function<void(const rendezvous::FailureRecord&)> on_failure;
    // The store's host finished and leaves: no failure, but nothing is shared any more.
    std::function<void()> on_store_leaving;
    // The store's connection failed: message says how, loss what it means. For the watch,
    // silence only once it lasted the tolerance.
    std::function<void(const std::string& message, PeerLoss loss)> on_store_lost;
  };

  // host: what the other nodes know this node by (in its records); tolerance: how long the
  // store may go unheard before the watch reports it lost.
  // record_wait: how long await_record() waits (normally a store round trip away).
  JobWatch(boost::asio::io_context& io, std::string host, std::chrono::milliseconds tolerance,
           EventLog& events, Hooks hooks,
           std::chrono::milliseconds record_wait = std::chrono::seconds(10));
  JobWatch(const JobWatch&) = delete;
  JobWatch& operator=(const JobWatch&) = delete;

  // Watches round's attempt over connections (nothing on one node). report_stalls: a static
  // job, which has no heartbeats, says when the store was silent and came back.
  void begin(const rendezvous::RendezvousInfo& round, JobConnections connections,
             bool report_stalls);
  // A record read another way (once the exit barrier ended), treated as if the watch heard it.
  void hear(const rendezvous::FailureRecord& record);
  // The rendezvous watcher lost the store (its own error, what it means): passed on once the
  // watch's error had a moment to come first; at once when nothing watches.
  void rendezvous_lost_store(const std::string& message, PeerLoss loss);
  // After this node published: waits for the record that holds (its own, or another node's a
  // moment earlier), since every node must decide from the same one. on_timeout runs on the
  // loop when none came within record_wait, unless settle() came first.
  void await_record(std::function<void()> on_timeout);
  // Ends that wait (the record arrived, the store went): true when a record was awaited.
  bool settle();
  // Publishes this node's failure (JobFailureLink::publish), recorded as failure_published;
  // false when nothing was published.
  bool publish(rendezvous::FailureRecord record);
  // Stops watching; what was published and heard is kept, nothing is called back.
  void stop();
  // Hands the watch over to flush it off the loop before exiting; keep_watching: a node whose
  // workers succeeded still hears a failure elsewhere while in its exit barrier.
  std::unique_ptr<rendezvous::FailureWatch> release(bool keep_watching);
  // The store is gone for this node (lost, or it announced that it leaves).
  void mark_store_gone() { store_gone_ = true; }

  [[nodiscard]] bool watching() const { return link_.watching(); }
  [[nodiscard]] bool published() const { return link_.published(); }
  [[nodiscard]] const std::optional<rendezvous::FailureRecord>& failure() const {
    return link_.failure();
  }
  [[nodiscard]] bool is_mine(const rendezvous::FailureRecord& record) const {
    return link_.is_mine(record);
  }
  [[nodiscard]] bool awaiting_record() const { return awaiting_record_; }
  [[nodiscard]] bool store_gone() const { return store_gone_; }
  [[nodiscard]] bool store_leaving() const { return store_leaving_; }

 private:
  void on_record(uint64_t epoch, const rendezvous::FailureRecord& record);
  void on_lost(uint64_t epoch, const std::string& message, PeerLoss loss);

  boost::asio::io_context& io_;
  JobFailureLink link_;
  EventLog& events_;
  Hooks hooks_;
  uint64_t epoch_ = 0;  // bumps when the attempt watched changes: late news is dropped
  boost::asio::steady_timer cause_timer_;
  std::chrono::milliseconds record_wait_;
  boost::asio::steady_timer record_timer_;
  bool awaiting_record_ = false;
  bool store_gone_ = false;
  bool store_leaving_ = false;
};

}  // namespace ddp::launcher
