#pragma once
// Workers' descendants that leave their process group (`setsid -f daemon`, a double fork)
// escape killpg, and would outlive the job under PID 1. As a child subreaper (prctl
// PR_SET_CHILD_SUBREAPER) the agent adopts them instead when their parent exits, so it can
// find them among its own children and stop them with the worker group.
#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace ddp::launcher {

// Makes this process the reaper of its orphaned descendants. Returns false (errno set) when
// the kernel refuses (before Linux 3.4).
bool become_child_subreaper();

struct AdoptedProcess {
  pid_t pid = 0;
  std::string name;  // /proc/<pid>/comm
};

// SIGKILLs and reaps every child of this process that known(pid) does not claim (the
// workers, the guardian), round after round, since a killed daemon's own children are
// adopted next; zombies of adopted processes are reaped without counting. Returns the live
// processes it had to kill that had left their worker's process group: a child still in a
// group worker_group(pgid) names (a shell worker's `sleep`, adopted when the shell died first,
// already sent the group's SIGKILL) is killed and reaped too, but was never outside. Waits at
// most about a second for them to die.
std::vector<AdoptedProcess> stop_adopted_children(const std::function<bool(pid_t)>& known,
                                                  const std::function<bool(pid_t)>& worker_group);

}  // namespace ddp::launcher
