#pragma once
// The seam between the agent's state machine and real processes: the real spawner uses
// Boost.Process; tests use a fake that exits workers on command.
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/binding/cpu_binding.hpp"
#include "launcher/process/exit_status.hpp"

namespace ddp::launcher {

struct WorkerProcessSpec {
  int local_rank = 0;
  std::vector<std::string> argv;  // argv[0] is the resolved executable
  std::vector<std::string> env;   // full environment, "NAME=value"
  CpuBinding binding;             // applied in the child before exec; empty: none
  // The worker's end of its recovery channel (recovery_link.hpp), given to it as descriptor
  // recovery::kChildFd; -1: none.
  int channel_fd = -1;
};

struct WorkerCallbacks {
  // Raw output bytes; stream 1 = stdout, 2 = stderr. Called on the agent's loop.
  std::function<void(int stream, std::string_view bytes)> on_output;
  // The worker ended; all output it wrote before exiting was delivered first.
  std::function<void(ExitStatus status)> on_exit;
  // False while output of this stream cannot be taken (the console is congested): the
  // spawner stops reading that pipe until resume_output(). Null: always read.
  std::function<bool(int stream)> ready_for_output;
};

class WorkerSpawner {
 public:
  virtual ~WorkerSpawner() = default;
  // Starts a worker in its own process group; returns its pid. Throws Error when it
  // cannot be started (names the program and errno text).
  virtual int spawn(const WorkerProcessSpec& spec, WorkerCallbacks callbacks) = 0;
  // Sends sig to the worker's whole process group (ignored when it is already gone).
  virtual void signal_group(int pid, int sig) = 0;
  // Sends sig to the worker process alone (a stack dump request; ignored when gone).
  virtual void signal_process(int pid, int sig) = 0;
  // After the worker exited: kills what is left of its process group and forgets it.
  virtual void release(int pid) = 0;
  // Once the whole group is released: kills what the workers started outside their process
  // groups (setsid daemons) and returns one "pid 123 (sleep)" per process. Default: none.
  virtual std::vector<std::string> stop_escaped() { return {}; }
  // The console has room again: reads paused by ready_for_output are asked again.
  virtual void resume_output() {}
};

}  // namespace ddp::launcher
