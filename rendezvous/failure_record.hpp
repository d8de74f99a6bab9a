#pragma once
// The job-wide failure record: one per attempt (rendezvous round), written once by whichever
// agent saw its group fail first (COMPARE_SET on an empty key, so the first record wins and
// every agent reads the same root cause). Every agent waits for it (failure_watch.hpp) and
// stops its workers as soon as it appears. A static node also leaves one, pre-written, as
// its connection's ON_CLOSE record (store.hpp's Presence): when its agent dies, the store
// publishes the loss for it.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rendezvous/exit_barrier.hpp"
#include "rendezvous/store/store.hpp"

namespace ddp::rendezvous {

struct FailureRecord {
  // "worker" (a worker exited non-zero or died of a signal), "hang" (hang detection stopped
  // the group), "unkillable" (a worker survived SIGKILL), "agent_signal" (the agent was told
  // to stop), "node_lost" (the agent's store connection closed: killed, crashed, host gone).
  // Not a failure: "store_leaving", written by the agent hosting the store when its own
  // workers succeeded and it leaves (its exit barrier ended): the others run on without a
  // store, and must not take its disappearance for a failure.
  std::string kind = "worker";
  uint64_t attempt = 0;  // the round / TORCHELASTIC_RESTART_COUNT it happened in
  int group_rank = -1;   // the node (GROUP_RANK, static: node_rank)
  std::string host;      // that node's address or name
  int rank = -1;         // the worker's RANK, -1 when no single worker
  int local_rank = -1;
  int pid = 0;        // the worker's pid, else the agent's
  int exit_code = 0;  // meaningful when signal == 0
  int signal = 0;
  double time = 0;        // unix seconds when it was observed
  std::string message;    // the error file's message, or what the agent saw
  std::string traceback;  // the error file's traceback (trimmed), may be empty
  // Its node will not restart itself (it could not start its workers): nobody restarts.
  bool final = false;

  // What a shell reports for the root cause: exit_code, 128+signal; 1 for a lost node.
  [[nodiscard]] int shell_status() const;
  // "rank 3 (local_rank 1) on node 2 (10.0.0.3): exit code 3: boom" for summaries and logs.
  [[nodiscard]] std::string describe() const;
  // A lost node, or one whose agent was told to stop, does not come back, and a final record
  // is one its node will not restart from: the others restarting would wait for it forever.
  [[nodiscard]] bool restartable() const {
    return kind != "node_lost" && kind != "agent_signal" && !final;
  }
  [[nodiscard]] bool is_failure() const { return kind != "store_leaving"; }
};

// Announces that the store host leaves after its workers succeeded, as attempt's record
// (unless a failure holds it already), then waits up to ack_timeout for the nodes in
// still_running (group ranks) to acknowledge it (their failure watches set
// store_leaving_ack_key), so none of them takes the store's going away for a failure.
void announce_store_leaving(Store& store, uint64_t attempt, int group_rank, const std::string& host,
                            const std::vector<int>& still_running,
                            Duration ack_timeout = std::chrono::seconds(2));
std::string store_leaving_ack_key(uint64_t attempt, int group_rank);

// The store host leaving after a failed attempt (the store goes with its agent), static or
// elastic alike: waits, ack_timeout at most, until every member of barrier (in barrier.store)
// other than self that is not counted out and whose agent is still connected (alive_key(member)
// is there) acknowledged attempt's record (store_leaving_ack_key), so that a node slow to read
// it does not take the store's going away for the host's death (exit 1 instead of the root
// cause's code). Returns at once when no record holds the attempt.
void wait_for_failure_readers(const ExitBarrier& barrier, uint64_t attempt, int self,
                              const std::function<std::string(int)>& alive_key,
                              Duration ack_timeout = std::chrono::seconds(2));

// The key of attempt's record, relative to the rendezvous' prefix.
std::string failure_key(uint64_t attempt);
// JSON; decode throws ProtocolError naming what is wrong with text.
std::string encode_failure(const FailureRecord& record);
FailureRecord decode_failure(const std::string& text);
// Publishes record for its attempt unless one is there; returns the record that holds (ours
// or the earlier one).
FailureRecord publish_failure(Store& store, const FailureRecord& record);
// Seconds since the epoch, now.
double unix_now();

}  // namespace ddp::rendezvous
