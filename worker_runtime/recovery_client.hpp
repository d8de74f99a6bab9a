#pragma once
// The worker's end of the in-place recovery channel (common/recovery_protocol.hpp): with
// ddplaunch --in_place_recovery the agent hands each worker a socketpair end as
// $DDPLAUNCH_RECOVERY_FD. A reader thread answers `abort` at once (it aborts the current
// process group, so a collective blocked on a lost peer fails now instead of at its
// deadline, then replies `aborted`) and keeps the `round` notice for DistContext::recover().
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/error.hpp"
#include "common/fd.hpp"
#include "common/recovery_protocol.hpp"
#include "worker_runtime/env_contract.hpp"
#include "worker_runtime/process_group.hpp"

namespace ddp::worker_runtime {

// The agent is gone or sent no round notice in time: recovery cannot go on (the worker exits
// with the error; the agent restarts it, or the job ends).
class RecoveryError : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};

class RecoveryClient {
 public:
  // Adopts the channel, sends `hello pid= local_rank=` and starts reading.
  // SocketError when the hello cannot be written.
  RecoveryClient(Fd channel, int local_rank);
  // Shuts the channel down (the reader wakes) and joins the reader.
  ~RecoveryClient();
  RecoveryClient(const RecoveryClient&) = delete;
  RecoveryClient& operator=(const RecoveryClient&) = delete;

  // The group an `abort` aborts (null: none, e.g. while it is rebuilt). When a change was
  // announced after the last notice was taken, the group is aborted at once: it belongs to a
  // round that is already over.
  void set_group(ProcessGroup* group);

  // The round notice not yet taken, waiting up to timeout for one. RecoveryError naming
  // what it waited for when the timeout passes or the agent closed the channel.
  recovery::RoundNotice wait_round(Duration timeout);
  // Waits up to timeout for a membership change not yet taken (an abort or a round notice):
  // true when one came, false when none did (a failed collective the agent saw no reason
  // for: not a recovery). RecoveryError when the agent closed the channel.
  bool wait_change(Duration timeout);
  // How long a failed collective waits in wait_change() (DDPLAUNCH_RECOVERY_CHANGE_WAIT).
  [[nodiscard]] Duration change_wait() const { return change_wait_; }
  void set_change_wait(Duration wait) { change_wait_ = wait; }
  // True when a membership change was announced (abort or round) since the last notice was
  // taken: the current group is (being) aborted.
  [[nodiscard]] bool change_pending() const;
  // False once the agent closed the channel (EOF or error).
  [[nodiscard]] bool connected() const;

  // `joined round= rank= step= source= state_bytes=` (source -1: nothing was sent).
  void send_joined(int64_t round, int rank, int64_t step, int source, int64_t state_bytes);
  // `stepped round= step=`: the first step after a change is done.
  void send_stepped(int64_t round, int64_t step);
  // The group of round is built (the agent's --recovery_timeout ends here for this worker).
  void send_built(int64_t round);

 private:
  void read_loop();
  void handle(const recovery::Message& message);
  void on_change(const std::string& why);
  void send(const recovery::Message& message);

  Fd channel_;
  Duration change_wait_ = std::chrono::seconds(60);
  std::mutex write_mu_;  // lines from the reader (aborted) and the trainer never interleave
  mutable std::mutex mu_;
  std::condition_variable cv_;
  ProcessGroup* group_ = nullptr;                 // guarded by mu_
  std::optional<recovery::RoundNotice> pending_;  // guarded by mu_
  uint64_t changes_ = 0;                          // announced changes; guarded by mu_
  uint64_t taken_ = 0;                            // changes_ when a notice was last taken
  // changes_ when the pending notice arrived: a change after it is not ended by it.
  uint64_t notice_changes_ = 0;
  bool round_announced_ = false;  // an abort came for the change the next round ends
  bool eof_ = false;
  std::string eof_reason_;
  std::thread reader_;  // last: started once every other member exists
};

// The client init() creates: null when DDPLAUNCH_RECOVERY_FD is unset or empty; ConfigError
// naming the variable and its value when it is not an open descriptor number >= 0, or when
// DDPLAUNCH_RECOVERY_CHANGE_WAIT is not a whole number of seconds from 1 to 86400.
std::unique_ptr<RecoveryClient> make_recovery_client(const EnvMap& env, int local_rank);

// For a spare's worker ($DDPLAUNCH_SPARE=1, started before its node was admitted): makes the
// client (local rank from LOCAL_RANK), waits on it for the round notice that admits the node
// (as long as the node stands by), and sets the notice's values in env, the env contract of a
// worker started in that round. A standby worker ($DDPLAUNCH_STANDBY=1 too) has no LOCAL_RANK
// until then (hello says 0) and takes it from the notice's local_rank. Both variables are
// erased. Null, env untouched, for any other worker. ConfigError when the spare variable is
// set without a recovery channel, or the standby one without the spare one; ProtocolError when
// a standby's notice lacks local_rank; RecoveryError when the agent closes the channel first
// (the job ended without needing this node).
std::unique_ptr<RecoveryClient> await_admission(EnvMap& env);

}  // namespace ddp::worker_runtime
