#pragma once
// Child processes for multi-process tests: output captured in files, a deadline on every
// wait, and SIGKILL + reap in the destructor, so a failing assertion leaves nothing running.
#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/temp_dir.hpp"

namespace ddp::test {

struct ChildOptions {
  std::vector<std::string> argv;           // argv[0] is a path (no PATH search)
  std::map<std::string, std::string> env;  // added to (or replacing) the test's environment
  bool merge_stderr = false;               // stderr into stdout's capture, interleaved
  bool own_process_group = false;          // leads a new group; every kill hits the group
  // As nohup does. Otherwise SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1 and SIGUSR2 start at
  // their default action, whatever the test runner inherited.
  bool ignore_sighup = false;
};

// What wait() returns for a child it had to kill at the deadline.
inline constexpr int kTimedOut = -1;

class ChildProcess {
 public:
  // Starts argv[0]; throws when it cannot (an exec failure is exit 127 with a line on stderr).
  explicit ChildProcess(const ChildOptions& options);
  // SIGKILLs (the group, with own_process_group) and reaps a child still running.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }
  // Waits up to timeout: the exit code (128+N for signal N), nullopt if still running.
  std::optional<int> wait_for(std::chrono::milliseconds timeout);
  // As wait_for, but a child still running at the deadline is SIGKILLed and reaped, a line
  // saying so is added to its captured output, and the result is kTimedOut.
  int wait(std::chrono::milliseconds timeout);
  // True once wait() had to kill the child.
  [[nodiscard]] bool timed_out() const { return timed_out_; }
  // Sends signo to the child (to its group, with own_process_group) unless already reaped.
  void signal(int signo);
  // Waits up to timeout (or until the child exits) for stdout's first complete line and
  // returns it; at the deadline, whatever stdout holds so far.
  std::string first_line(std::chrono::milliseconds timeout);
  // Everything captured so far ("" for err() with merge_stderr).
  [[nodiscard]] std::string out() const;
  [[nodiscard]] std::string err() const;

 private:
  // Non-blocking: true (and the exit code recorded) once the child has exited.
  bool poll_exit();
  void record_exit(int status);
  void kill_and_reap();

  TempDir capture_;
  std::string out_path_;
  std::string err_path_;
  bool own_process_group_ = false;
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  bool timed_out_ = false;
};

struct ProcessResult {
  int exit_code = kTimedOut;  // exit status, 128 + N when killed by signal N, -1 on timeout
  bool timed_out = false;
  std::string output;  // stdout then stderr (interleaved with merge_stderr)
};

// Runs a child to completion within timeout (killed at the deadline) and returns its output.
ProcessResult run_process(const ChildOptions& options, std::chrono::milliseconds timeout);
// The same for argv in its own process group (so the deadline also takes whatever it
// started), stdout and stderr interleaved.
ProcessResult run_process(std::vector<std::string> argv, std::chrono::milliseconds timeout);

// True until pid has exited (a zombie counts as exited).
bool process_alive(pid_t pid);
// Waits up to timeout until every pid (those > 0) has exited; then SIGKILLs any still there,
// so a failing check leaves nothing running. True when all had gone by themselves.
bool all_gone(const std::vector<pid_t>& pids, std::chrono::milliseconds timeout);

}  // namespace ddp::test
