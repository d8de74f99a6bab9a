#include "launcher/process/process_spawner.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <boost/asio.hpp>
#include <boost/process/v2.hpp>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>

#include "common/error.hpp"
#include "common/recovery_protocol.hpp"
#include "launcher/process/adopted_processes.hpp"
#include "launcher/process/orphan_guardian.hpp"

namespace ddp::launcher {
namespace asio = boost::asio;
namespace bp = boost::process::v2;

namespace {

// Forks and execs one worker without waiting for the exec: Boost.Process v2's launchers
// wait for each child's exec in turn (and re-create the epoll set inside every child),
// which serializes a group's start-up. Exec failures still surface: the child reports on
// its stderr pipe and exits 127, which the agent sees as that worker's failure.
// Only async-signal-safe calls between fork() and exec (the agent has threads).
void write_number(int value) {
  char digits[12];
  int n = 0;
  for (; n == 0 || value > 0; value /= 10) digits[n++] = static_cast<char>('0' + value % 10);
  ssize_t ignored = 0;
  while (n > 0) ignored = ::write(STDERR_FILENO, &digits[--n], 1);
  (void)ignored;
}

// Writes "ddplaunch: <what> failed: <detail>: errno N" to the child's stderr (async-signal-safe).
void report_child_failure(const char* what, const char* detail, int err) {
  const char prefix[] = "ddplaunch: ";
  ssize_t ignored = ::write(STDERR_FILENO, prefix, sizeof(prefix) - 1);
  ignored = ::write(STDERR_FILENO, what, ::strlen(what));
  ignored = ::write(STDERR_FILENO, " failed: ", 9);
  ignored = ::write(STDERR_FILENO, detail, ::strlen(detail));
  ignored = ::write(STDERR_FILENO, ": errno ", 8);
  write_number(err);
  ignored = ::write(STDERR_FILENO, "\n", 1);
  (void)ignored;
}

pid_t fork_worker(const char* path, char* const argv[], char* const envp[], int in_fd, int out_fd,
                  int err_fd, int channel_fd, pid_t agent_pid, const PreparedBinding& binding) {
  // Until exec, the child carries the agent's Asio signal handlers, which would report a
  // signal sent to the young worker (a stop racing its start) as a signal to the agent.
  // So every signal stays blocked across fork() until the child has reset its handlers.
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  pid_t pid = ::fork();
  if (pid != 0) {
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    // Also in the parent, so a killpg() right after spawn() can never miss the child.
    if (pid > 0) ::setpgid(pid, pid);
    return pid;
  }
  // Caught signals go back to their defaults; ignored ones stay ignored (nohup's SIGHUP).
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction current {};
    if (::sigaction(sig, nullptr, &current) != 0) continue;
    bool caught = (current.sa_flags & SA_SIGINFO) != 0 ||
                  (current.sa_handler != SIG_IGN && current.sa_handler != SIG_DFL);
    if (caught) ::signal(sig, SIG_DFL);
  }
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  // The agent may have died between fork() and prctl(): then nobody would kill us.
  if (::getppid() != agent_pid) ::_exit(128 + SIGKILL);
  if (in_fd >= 0) ::dup2(in_fd, STDIN_FILENO);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  // Workers start with a clean mask (pending stop signals are delivered now, by default).
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Nothing but stdin/stdout/stderr (and the recovery channel, as descriptor 3) crosses exec:
  // not the store sockets, not other workers' pipes.
  unsigned first_closed = 3U;
  if (channel_fd >= 0) {
    if (channel_fd != recovery::kChildFd) ::dup2(channel_fd, recovery::kChildFd);
    ::fcntl(recovery::kChildFd, F_SETFD, 0);  // dup2 onto itself keeps FD_CLOEXEC
    first_closed = recovery::kChildFd + 1U;
  }
  ::syscall(SYS_close_range, first_closed, ~0U, CLOSE_RANGE_CLOEXEC);
  // Bound before exec, so the program (and every thread it starts) never runs unbound.
  const char* call = "";
  if (int err = binding.apply(&call); err != 0) {
    report_child_failure(call, path, err);
    ::_exit(127);
  }
  ::execve(path, argv, envp);
  report_child_failure("exec", path, errno);
  ::_exit(127);
}

constexpr size_t kReadChunk = size_t{64} * 1024;

}  // namespace

struct ProcessSpawner::Child {
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-member-init): the buffers are unzeroed on purpose
  explicit Child(asio::io_context& io) : out(io), err(io) {}
  asio::readable_pipe& pipe(int stream) { return stream == 1 ? out : err; }
  std::array<char, kReadChunk>& buffer(int stream) { return stream == 1 ? out_buffer : err_buffer; }

  int pid = 0;
  std::optional<bp::process> process;
  asio::readable_pipe out;
  asio::readable_pipe err;
  // Not zeroed: a read writes what it returns, and pages nobody wrote to are never resident
  // (zeroing both cost every worker 128 KiB of the agent's memory at spawn).
  std::array<char, kReadChunk> out_buffer;  // NOLINT(cppcoreguidelines-pro-type-member-init)
  std::array<char, kReadChunk> err_buffer;  // NOLINT(cppcoreguidelines-pro-type-member-init)
  WorkerCallbacks callbacks;
  bool exited = false;  // the process itself has ended
  ExitStatus status;
  bool eof[2] = {false, false};      // per stream: nothing more can come
  bool settled[2] = {false, false};  // per stream: all output written before the exit is in
  bool parked[2] = {false, false};   // per stream: no read issued, the console is congested
  bool reported = false;
  bool released = false;
};

ProcessSpawner::ProcessSpawner(asio::io_context& io, OrphanGuardian* guardian, bool adopt_daemons)
    : io_(io), guardian_(guardian) {
  // Workers live in their own process groups, i.e. in the terminal's background: reading a
  // terminal there stops them (SIGTTIN) and the job would hang. Give them /dev/null then;
  // a pipe or file on stdin is inherited as torchrun does.
  if (::isatty(STDIN_FILENO) != 0) stdin_fd_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  // --adopt_daemons (the default): a worker's daemon (setsid -f) is adopted by the agent,
  // not by PID 1, so the group's stop can find it (stop_escaped).
  if (adopt_daemons) become_child_subreaper();
}

ProcessSpawner::~ProcessSpawner() {
  for (auto& [pid, child] : children_) {
    child->released = true;
    ::killpg(pid, SIGKILL);
    boost::system::error_code ec;
    child->out.close(ec);
    child->err.close(ec);
    // bp::process's destructor reaps a still-running child after SIGKILL.
    child->process.reset();
    if (guardian_ != nullptr) guardian_->forget_group(pid);
  }
}

int ProcessSpawner::spawn(const WorkerProcessSpec& spec, WorkerCallbacks callbacks) {
  if (spec.argv.empty()) throw Error("worker " + std::to_string(spec.local_rank) + ": no argv");
  auto child = std::make_shared<Child>(io_);
  child->callbacks = std::move(callbacks);
  asio::writable_pipe out_write(io_);
  asio::writable_pipe err_write(io_);
  asio::connect_pipe(child->out, out_write);
  asio::connect_pipe(child->err, err_write);

  // Everything the child needs is laid out before fork(): no allocation after it.
  std::vector<std::string> argv_strings = spec.argv;
  std::vector<std::string> env_strings = spec.env;
  std::vector<char*> argv;
  argv.reserve(argv_strings.size() + 1);
  for (auto& arg : argv_strings) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (auto& entry : env_strings) envp.push_back(entry.data());
  envp.push_back(nullptr);
  PreparedBinding binding(spec.binding);
  pid_t pid = fork_worker(argv_strings.front().c_str(), argv.data(), envp.data(), stdin_fd_.get(),
                          out_write.native_handle(), err_write.native_handle(), spec.channel_fd,
                          ::getpid(), binding);
  if (pid < 0) {
    throw Error("could not start worker " + std::to_string(spec.local_rank) + " ('" +
                spec.argv.front() + "'): fork() failed: " + errno_text(errno));
  }
  out_write.close();
  err_write.close();
  // Boost.Process watches it from here: a pidfd on the loop, reaped by async_wait.
  bp::process process(io_.get_executor(), pid);
  child->pid = process.id();
  child->process.emplace(std::move(process));
  if (guardian_ != nullptr) guardian_->watch_group(child->pid);
  children_[child->pid] = child;

  read_stream(child, 1);
  read_stream(child, 2);
  child->process->async_wait([this, child](boost::system::error_code wait_ec, int /*code*/) {
    if (wait_ec == asio::error::operation_aborted || child->released) return;
    child->exited = true;
    child->status = ExitStatus::from_wait_status(child->process->native_exit_code());
    // The exit is reported once each stream has delivered what the worker wrote before it
    // ended. A wrapper's child may keep a pipe open forever, so pending reads are cancelled
    // and the pipes drained without waiting (see on_read).
    for (int stream : {1, 2}) {
      if (child->eof[stream - 1]) {
        child->settled[stream - 1] = true;
      } else if (child->parked[stream - 1]) {
        // No read in flight to cancel: what it wrote before the exit is read now (at most a
        // pipe's worth past the console's bound), so the exit is never held by the console.
        child->parked[stream - 1] = false;
        drain(*child, stream);
        child->settled[stream - 1] = true;
      } else {
        boost::system::error_code ignored;
        child->pipe(stream).cancel(ignored);
      }
    }
    report_exit_when_settled(*child);
  });
  return child->pid;
}

void ProcessSpawner::read_stream(const std::shared_ptr<Child>& child, int stream) {
  // Back-pressure: while the console this stream goes to is congested, its pipe is not read,
  // and the worker blocks in write(2) as under a slow terminal. Its exit still is seen.
  if (!child->exited && child->callbacks.ready_for_output &&
      !child->callbacks.ready_for_output(stream)) {
    child->parked[stream - 1] = true;
    return;
  }
  child->pipe(stream).async_read_some(
      asio::buffer(child->buffer(stream)),
      [this, child, stream](boost::system::error_code ec, size_t n) {
        if (child->released) return;
        if (n > 0 && child->callbacks.on_output) {
          child->callbacks.on_output(stream, std::string_view(child->buffer(stream).data(), n));
        }
        if (ec && ec != asio::error::operation_aborted) child->eof[stream - 1] = true;
        if (child->exited && !child->settled[stream - 1]) {
          // Everything written before the exit is in the pipe now, after the bytes above.
          drain(*child, stream);
          child->settled[stream - 1] = true;
          report_exit_when_settled(*child);
          if (child->released) return;
        }
        // Keep reading what a worker's own children still write, until EOF or release().
        if (!child->eof[stream - 1]) read_stream(child, stream);
      });
}

void ProcessSpawner::report_exit_when_settled(Child& child) {
  if (child.reported || !child.settled[0] || !child.settled[1]) return;
  child.reported = true;
  if (child.callbacks.on_exit) child.callbacks.on_exit(child.status);
}

void ProcessSpawner::drain(Child& child, int stream) {
  auto& pipe = child.pipe(stream);
  if (!pipe.is_open() || child.eof[stream - 1]) return;
  int fd = pipe.native_handle();
  int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  auto& buffer = child.buffer(stream);
  for (;;) {
    ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n == 0) child.eof[stream - 1] = true;
    if (n <= 0) break;
    if (child.callbacks.on_output) {
      child.callbacks.on_output(stream, std::string_view(buffer.data(), static_cast<size_t>(n)));
    }
  }
}

void ProcessSpawner::resume_output() {
  // Copies: a read's handler may release a child (and erase it from the map).
  std::vector<std::shared_ptr<Child>> children;
  for (const auto& entry : children_) children.push_back(entry.second);
  for (const auto& child : children) {
    for (int stream : {1, 2}) {
      if (!child->parked[stream - 1] || child->released) continue;
      child->parked[stream - 1] = false;
      read_stream(child, stream);
    }
  }
}

void ProcessSpawner::signal_group(int pid, int sig) {
  if (children_.count(pid) != 0) ::killpg(pid, sig);
}

void ProcessSpawner::signal_process(int pid, int sig) {
  if (children_.count(pid) != 0) ::kill(pid, sig);
}

std::vector<std::string> ProcessSpawner::stop_escaped() {
  const pid_t guardian = guardian_ != nullptr ? guardian_->pid() : -1;
  auto stopped = stop_adopted_children(
      [&](pid_t pid) { return pid == guardian || children_.count(pid) != 0; },
      [&](pid_t pgid) { return children_.count(pgid) != 0 || released_groups_.count(pgid) != 0; });
  released_groups_.clear();
  std::vector<std::string> described;
  described.reserve(stopped.size());
  for (const auto& process : stopped) {
    described.push_back("pid " + std::to_string(process.pid) + " (" + process.name + ")");
  }
  return described;
}

void ProcessSpawner::release(int pid) {
  auto it = children_.find(pid);
  if (it == children_.end()) return;
  // Whatever the worker left behind in its group (a wrapper script's children) goes too.
  ::killpg(pid, SIGKILL);
  released_groups_.insert(pid);
  if (guardian_ != nullptr) guardian_->forget_group(pid);
  it->second->released = true;
  boost::system::error_code ec;
  it->second->out.close(ec);
  it->second->err.close(ec);
  children_.erase(it);
}

}  // namespace ddp::launcher
