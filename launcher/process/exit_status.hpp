#pragma once
// How a worker ended, and its shell-style status (exit code, or 128+N for signal N).
#include <string>

namespace ddp::launcher {

struct ExitStatus {
  int exit_code = 0;  // meaningful when signal == 0
  int signal = 0;     // the signal that killed the process, 0 when it exited

  // Decodes a waitpid() status word.
  static ExitStatus from_wait_status(int status);
  [[nodiscard]] bool success() const { return signal == 0 && exit_code == 0; }
  // What a shell would report: exit_code, or 128+signal.
  [[nodiscard]] int shell_status() const { return signal != 0 ? 128 + signal : exit_code; }
  // "exit code 3" / "signal 9 (SIGKILL)".
  [[nodiscard]] std::string describe() const;
};

// "SIGKILL" for 9, "SIG<N>" for unknown numbers.
std::string signal_name(int signal);

}  // namespace ddp::launcher
