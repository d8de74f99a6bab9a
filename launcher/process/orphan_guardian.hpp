#pragma once
// A tiny process forked at agent start-up that outlives a SIGKILLed agent just long enough
// to kill every worker process group the agent registered. PR_SET_PDEATHSIG only reaches
// the worker itself; a wrapper script's children would otherwise be orphaned.
// The agent holds one end of a socket pair; the guardian sees EOF when the agent dies
// (however it dies) and killpg(SIGKILL)s every registered group.
#include <sys/types.h>

#include "common/fd.hpp"

namespace ddp::launcher {

class OrphanGuardian {
 public:
  // Forks the guardian. Call before any thread is started (the child runs normal code).
  // Throws Error (with errno text) when socketpair() or fork() fails.
  OrphanGuardian();
  // Closes the agent's end of the socket pair (the guardian kills what is still registered)
  // and reaps it.
  ~OrphanGuardian();
  OrphanGuardian(const OrphanGuardian&) = delete;
  OrphanGuardian& operator=(const OrphanGuardian&) = delete;

  // Asks the guardian to kill process group pgid if the agent dies.
  void watch_group(pid_t pgid);
  // The group is gone: the guardian must not kill it (its id may be reused).
  void forget_group(pid_t pgid);
  [[nodiscard]] pid_t pid() const { return pid_; }

 private:
  void send(int record);

  pid_t pid_ = -1;
  Fd write_fd_;
};

}  // namespace ddp::launcher
