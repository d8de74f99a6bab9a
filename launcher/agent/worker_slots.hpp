#pragma once
// What the agent knows of each local rank's worker beyond its process (WorkerGroup keeps the
// pid and whether it runs), and how an exit becomes a failure: assembled the way torch's
// PContext hands back a ProcessFailure, with the error file already read.
#include <filesystem>
#include <string>
#include <vector>

#include "launcher/output/error_report.hpp"
#include "launcher/process/exit_status.hpp"

namespace ddp::launcher {

struct WorkerSlot {
  int local_rank = 0;
  int rank = 0;
  std::string error_file;
  std::string hang;      // what hang detection said of this rank (for the summary)
  bool culprit = false;  // named as the culprit of the hang
  bool dumping = false;  // sent SIGABRT for its stack; the group waits for it to exit

  // A new worker in this slot as global rank rank: nothing said of it yet, and its error file
  // (error.json in dir, created) does not exist.
  void begin(int global_rank, const std::filesystem::path& dir);
};

// The failure of slot's worker (pid) that exited with status: its error file's content; for a
// hung culprit that left none, one the agent writes ("hang: ..." with the stack it printed,
// stderr_tail); what hang detection said; and, for a worker killed by a signal, stderr_tail.
WorkerFailure assemble_failure(const WorkerSlot& slot, int pid, ExitStatus status,
                               std::vector<std::string> stderr_tail);

// While the group stops with stop_signal, an exit counts as a failure of its own unless it
// died of that signal (or of SIGKILL after the grace) and says nothing else: no error file,
// no hang.
bool failed_on_its_own(const WorkerFailure& failure, int stop_signal);

}  // namespace ddp::launcher
