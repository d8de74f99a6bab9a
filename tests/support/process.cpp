#include "tests/support/process.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "tests/support/files.hpp"
#include "tests/support/wait_until.hpp"

extern char** environ;  // NOLINT: POSIX

namespace ddp::test {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(5);

// The test's environment with overrides applied, as "NAME=value" strings.
std::vector<std::string> child_environment(const std::map<std::string, std::string>& overrides) {
  std::map<std::string, std::string> merged;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text(*entry);
    const auto eq = text.find('=');
    if (eq != std::string::npos) merged[text.substr(0, eq)] = text.substr(eq + 1);
  }
  for (const auto& [name, value] : overrides) merged[name] = value;
  std::vector<std::string> env;
  for (const auto& [name, value] : merged) env.push_back(name + "=" + value);
  return env;
}

std::vector<char*> pointers_to(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (auto& text : strings) pointers.push_back(text.data());
  pointers.push_back(nullptr);
  return pointers;
}

int open_capture(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("cannot create " + path + ": " + std::strerror(errno));
  return fd;
}

}  // namespace

ChildProcess::ChildProcess(const ChildOptions& options)
    : out_path_(capture_.file("stdout")),
      err_path_(options.merge_stderr ? out_path_ : capture_.file("stderr")),
      own_process_group_(options.own_process_group) {
  if (options.argv.empty()) throw std::invalid_argument("ChildProcess: argv is empty");
  // Everything the child needs is built before fork: after it, only async-signal-safe calls
  // (the test process may have threads).
  std::vector<std::string> env_strings = child_environment(options.env);
  std::vector<std::string> arg_strings = options.argv;
  std::vector<char*> envp = pointers_to(env_strings);
  std::vector<char*> argv = pointers_to(arg_strings);
  const std::string exec_failed = "exec " + options.argv[0] + " failed\n";

  const int out_fd = open_capture(out_path_);
  const int err_fd = options.merge_stderr ? out_fd : open_capture(err_path_);
  pid_ = ::fork();
  if (pid_ == 0) {
    if (options.own_process_group) ::setpgid(0, 0);
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    // The signals tests send start at their default action, whatever the test runner inherited
    // (nohup ignores SIGHUP; a shell's background job, SIGINT and SIGQUIT), unless asked.
    for (int sig : {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2}) ::signal(sig, SIG_DFL);
    if (options.ignore_sighup) ::signal(SIGHUP, SIG_IGN);
    ::execve(argv[0], argv.data(), envp.data());
    [[maybe_unused]] const auto written =
        ::write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::close(out_fd);
  if (err_fd != out_fd) ::close(err_fd);
  if (pid_ < 0) {
    throw std::runtime_error("fork for " + options.argv[0] +
                             " failed: " + std::strerror(fork_errno));
  }
  // Also here, so that a kill right after the constructor already reaches the group.
  if (own_process_group_) ::setpgid(pid_, pid_);
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !exit_code_) kill_and_reap();
}

void ChildProcess::record_exit(int status) {
  exit_code_ = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  // Whatever the child left running in its group goes with it (ESRCH when nothing did).
  if (own_process_group_) ::killpg(pid_, SIGKILL);
}

bool ChildProcess::poll_exit() {
  if (exit_code_) return true;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
  record_exit(status);
  return true;
}

void ChildProcess::kill_and_reap() {
  if (own_process_group_) {
    ::killpg(pid_, SIGKILL);
  } else {
    ::kill(pid_, SIGKILL);
  }
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  record_exit(status);
}

std::optional<int> ChildProcess::wait_for(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!poll_exit()) {
    if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
    std::this_thread::sleep_for(kPollInterval);
  }
  return exit_code_;
}

int ChildProcess::wait(std::chrono::milliseconds timeout) {
  if (auto code = wait_for(timeout)) return *code;
  kill_and_reap();
  timed_out_ = true;
  std::ofstream(err_path_, std::ios::app)
      << "\n[ddp::test] killed with SIGKILL: still running after " << timeout.count() << " ms\n";
  return kTimedOut;
}

void ChildProcess::signal(int signo) {
  if (exit_code_) return;
  if (own_process_group_) {
    ::killpg(pid_, signo);
  } else {
    ::kill(pid_, signo);
  }
}

std::string ChildProcess::first_line(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string text = out();
  while (text.find('\n') == std::string::npos) {
    // Read once more after the exit: the child may have written its line just before it.
    const bool exited = poll_exit();
    text = out();
    if (exited || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(kPollInterval);
  }
  return text.substr(0, text.find('\n'));
}

std::string ChildProcess::out() const {
  return read_file(out_path_);
}

std::string ChildProcess::err() const {
  return err_path_ == out_path_ ? std::string() : read_file(err_path_);
}

ProcessResult run_process(const ChildOptions& options, std::chrono::milliseconds timeout) {
  ChildProcess child(options);
  ProcessResult result;
  result.exit_code = child.wait(timeout);
  result.timed_out = child.timed_out();
  result.output = child.out() + child.err();
  return result;
}

ProcessResult run_process(std::vector<std::string> argv, std::chrono::milliseconds timeout) {
  ChildOptions options;
  options.argv = std::move(argv);
  options.merge_stderr = true;
  options.own_process_group = true;
  return run_process(options, timeout);
}

bool process_alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string line;
  std::getline(stat, line);
  // Field 3, after "pid (comm)": the state letter; Z = zombie, X = dead.
  const auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  const char state = line[close + 2];
  return state != 'Z' && state != 'X';
}

bool all_gone(const std::vector<pid_t>& pids, std::chrono::milliseconds timeout) {
  const auto alive = [&] {
    return std::any_of(pids.begin(), pids.end(),
                       [](pid_t pid) { return pid > 0 && process_alive(pid); });
  };
  const bool gone = wait_until([&] { return !alive(); }, timeout);
  for (const pid_t pid : pids) {
    if (pid > 0 && process_alive(pid)) ::kill(pid, SIGKILL);
  }
  return gone;
}

}  // namespace ddp::test
