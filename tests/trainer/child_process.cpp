#include "tests/trainer/child_process.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/trainer/temp_dir.hpp"

namespace ddp::trainer::test {

ProcessResult run_process(const std::vector<std::string>& argv, std::chrono::seconds timeout,
                          const std::map<std::string, std::string>& extra_env) {
  TempDir dir;
  const std::string log = dir.file("output.log");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    setpgid(0, 0);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    for (const auto& [k, v] : extra_env) setenv(k.c_str(), v.c_str(), 1);
    execv(args[0], args.data());
    _exit(127);
  }
  setpgid(pid, pid);  // also here: no race with the first killpg below
  ProcessResult result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      killpg(pid, SIGKILL);
      waitpid(pid, &status, 0);
      result.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  killpg(pid, SIGKILL);  // anything the program left in its group (ESRCH when none)
  if (!result.timed_out) {
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  std::ifstream in(log);
  std::ostringstream text;
  text << in.rdbuf();
  result.output = text.str();
  return result;
}

}  // namespace ddp::trainer::test
