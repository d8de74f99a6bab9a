#pragma once
// Failure reports: reading TORCHELASTIC_ERROR_FILE (PyTorch's JSON format, written by
// PyTorch's @record and by this project's worker runtime) and printing a torchrun-style
// summary whose root cause is the earliest failure: by its error-file timestamp where the
// worker wrote one, else by when the agent saw it exit.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/process/exit_status.hpp"

namespace ddp::launcher {

// What a worker's error file says.
struct ErrorFileContent {
  std::string message;
  std::string traceback;
  std::optional<double> timestamp;  // unix seconds, when the worker recorded it
  // The timestamp is only good to the second (PyTorch writes whole seconds), and the file's
  // own modification time did not fall within that second to refine it: shown without
  // milliseconds, never as ".000".
  bool whole_seconds = false;
};

// One failed worker.
struct WorkerFailure {
  int rank = 0;
  int local_rank = 0;
  int pid = 0;
  ExitStatus status;
  std::chrono::system_clock::time_point observed;  // when the agent saw the exit
  std::string error_file;                          // path handed to the worker
  std::optional<ErrorFileContent> error;           // its content, when it wrote one
  // A hang found by the agent (docs/hangs.md): what it said, and whether this rank was
  // named the culprit (a culprit is the root cause before any victim of the same hang).
  std::string hang;
  bool culprit = false;
  // The worker's last stderr lines when it died of a signal: a Python traceback from
  // faulthandler, a native worker's backtrace.
  std::vector<std::string> output_tail;
};

// Parses an error file; nullopt when it is missing, empty or not PyTorch's format. A timestamp
// in whole seconds (PyTorch's) takes the file's modification time when that lies within the
// same second: the moment it was written, to the nanosecond.
std::optional<ErrorFileContent> read_error_file(const std::string& path);
// Writes an error file in PyTorch's format (message, callstack, timestamp now) for a worker
// that left none: the agent's own account of why it ended (a hang). False when it cannot.
bool write_error_file(const std::string& path, const std::string& message,
                      const std::string& callstack);
// Index of the root cause: the earliest failure, each timed by its error-file timestamp
// (never later than its observed exit), else by its observed exit.
size_t root_cause_index(const std::vector<WorkerFailure>& failures);
// The summary block (torchrun's layout) for failures (non-empty), in observation order.
std::string format_failure_summary(const std::string& program, const std::string& host,
                                   const std::vector<WorkerFailure>& failures);

// The root cause of a multi-node job, as the job-wide failure record tells every node.
struct JobRootCause {
  uint64_t attempt = 0;
  int node = -1;  // group rank (static: node_rank)
  std::string host;
  std::string what;  // the record's one-line description
  int rank = -1;     // -1: not one worker (a node lost, an agent stopped)
  int local_rank = -1;
  int pid = 0;
  int exit_status = 0;  // the shell status every agent exits with
  double time = 0;      // unix seconds
  std::string message;
  std::string traceback;
};

// The summary of a multi-node job: this node's own failures (none when its workers were
// stopped because of another node), then the job's root cause, printed the same on every
// node.
std::string format_job_failure_summary(const std::string& program, const std::string& host,
                                       const std::vector<WorkerFailure>& local,
                                       const JobRootCause& root);

}  // namespace ddp::launcher
