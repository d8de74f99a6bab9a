#pragma once
// The real WorkerSpawner: children forked in their own process groups, dying with the agent
// (PR_SET_PDEATHSIG), watched by Boost.Process v2 handles (a pidfd on the agent's loop:
// event-driven, no polling), stdout/stderr read through pipes on the same loop.
#include <map>
#include <memory>
#include <set>

#include "common/fd.hpp"
#include "launcher/process/worker_spawner.hpp"

namespace boost::asio {
class io_context;  // NOLINT(readability-identifier-naming): Boost's name
}

namespace ddp::launcher {

class OrphanGuardian;

class ProcessSpawner final : public WorkerSpawner {
 public:
  // guardian may be null (then only PDEATHSIG protects against a killed agent).
  // adopt_daemons: become a child subreaper, so stop_escaped() finds what the workers started
  // outside their process groups.
  ProcessSpawner(boost::asio::io_context& io, OrphanGuardian* guardian, bool adopt_daemons = false);
  // Kills (SIGKILL) the groups of every worker still known and reaps them.
  ~ProcessSpawner() override;

  int spawn(const WorkerProcessSpec& spec, WorkerCallbacks callbacks) override;
  void signal_group(int pid, int sig) override;
  void signal_process(int pid, int sig) override;
  void release(int pid) override;
  // The agent is a child subreaper (adopted_processes.hpp): its adopted children that are
  // neither workers nor the guardian, nor in a worker's process group, are the workers'
  // escaped descendants.
  std::vector<std::string> stop_escaped() override;
  void resume_output() override;

 private:
  struct Child;
  void read_stream(const std::shared_ptr<Child>& child, int stream);
  void drain(Child& child, int stream);
  void report_exit_when_settled(Child& child);

  boost::asio::io_context& io_;
  OrphanGuardian* guardian_;
  std::map<int, std::shared_ptr<Child>> children_;
  // Process groups of workers released since the last stop_escaped(): what is still in them
  // was in its worker's group, not escaped from it.
  std::set<int> released_groups_;
  Fd stdin_fd_;  // /dev/null when the agent's stdin is a terminal; none: inherit
};

}  // namespace ddp::launcher
