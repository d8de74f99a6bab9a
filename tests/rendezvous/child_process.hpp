#pragma once
// Test helper: a child process with extra env vars and captured stdout+stderr. The destructor
// SIGKILLs and reaps it, so a failing test never leaves an orphan behind.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddp::test {

class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv,
               const std::map<std::string, std::string>& env) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    out_fd_ = fds[0];
  }
  ~ChildProcess() {
    if (pid_ > 0 && !status_) {
      ::kill(pid_, SIGKILL);
      int st = 0;
      ::waitpid(pid_, &st, 0);
    }
    if (out_fd_ >= 0) ::close(out_fd_);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Reads output until the child closes it or timeout passes, then reaps it (killing it on
  // timeout). Returns the exit code (-1 when killed or signalled).
  int wait(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buf[4096];
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{out_fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      ssize_t n = ::read(out_fd_, buf, sizeof(buf));
      if (n <= 0) break;
      output_.append(buf, static_cast<size_t>(n));
    }
    int st = 0;
    // Output closed is not exit yet: give the child the rest of the deadline to finish.
    while (::waitpid(pid_, &st, WNOHANG) == 0 && std::chrono::steady_clock::now() < deadline) {
      ::usleep(10 * 1000);
    }
    if (::waitpid(pid_, &st, WNOHANG) == 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &st, 0);
      output_ += "\n[killed after timeout]";
      status_ = -1;
      return -1;
    }
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return *status_;
  }
  // Reads until the output holds a complete first line (or timeout); returns that line.
  std::string first_line(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buf[256];
    while (output_.find('\n') == std::string::npos) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{out_fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      ssize_t n = ::read(out_fd_, buf, sizeof(buf));
      if (n <= 0) break;
      output_.append(buf, static_cast<size_t>(n));
    }
    return output_.substr(0, output_.find('\n'));
  }
  void signal(int signo) { ::kill(pid_, signo); }
  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] const std::string& output() const { return output_; }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string output_;
  std::optional<int> status_;
};

}  // namespace ddp::test
