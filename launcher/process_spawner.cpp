#include "launcher/process_spawner.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <array>
#include <boost/asio.hpp>
#include <boost/process/v2.hpp>
#include <csignal>
#include <cstdio>
#include <optional>

#include "common/error.hpp"
#include "launcher/orphan_guardian.hpp"

namespace ddp::launcher {
namespace asio = boost::asio;
namespace bp = boost::process::v2;

namespace {

// Runs in the forked child before exec: own process group, die with the agent, and a
// clean signal mask (the agent's loop may block signals in its threads).
struct WorkerExecSetup {
  pid_t agent_pid;

  template <typename Launcher>
  boost::system::error_code on_exec_setup(Launcher& /*launcher*/,
                                          const boost::filesystem::path& /*exe*/,
                                          const char* const* /*argv*/) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    // The agent may have died between fork() and prctl(): then nobody would kill us.
    if (::getppid() != agent_pid) ::_exit(128 + SIGKILL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    return {};
  }
};

constexpr size_t kReadChunk = 64 * 1024;

}  // namespace

struct ProcessSpawner::Child {
  explicit Child(asio::io_context& io) : out(io), err(io) {}
  asio::readable_pipe& pipe(int stream) { return stream == 1 ? out : err; }
  std::array<char, kReadChunk>& buffer(int stream) { return stream == 1 ? out_buffer : err_buffer; }

  int pid = 0;
  std::optional<bp::process> process;
  asio::readable_pipe out;
  asio::readable_pipe err;
  std::array<char, kReadChunk> out_buffer{};
  std::array<char, kReadChunk> err_buffer{};
  WorkerCallbacks callbacks;
  bool exited = false;  // the process itself has ended
  ExitStatus status;
  bool eof[2] = {false, false};      // per stream: nothing more can come
  bool settled[2] = {false, false};  // per stream: all output written before the exit is in
  bool reported = false;
  bool released = false;
};

ProcessSpawner::ProcessSpawner(asio::io_context& io, OrphanGuardian* guardian)
    : io_(io), guardian_(guardian) {}

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

  std::vector<std::string> args(spec.argv.begin() + 1, spec.argv.end());
  bp::process process(io_.get_executor());
  try {
    process = bp::process(io_.get_executor(), bp::filesystem::path(spec.argv.front()), args,
                          bp::process_stdio{stdin, out_write, err_write},
                          bp::process_environment(spec.env), WorkerExecSetup{::getpid()});
  } catch (const boost::system::system_error& e) {
    throw Error("could not start worker " + std::to_string(spec.local_rank) + " ('" +
                spec.argv.front() + "'): " + e.code().message());
  }
  out_write.close();
  err_write.close();
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

void ProcessSpawner::signal_group(int pid, int sig) {
  if (children_.count(pid) != 0) ::killpg(pid, sig);
}

void ProcessSpawner::release(int pid) {
  auto it = children_.find(pid);
  if (it == children_.end()) return;
  // Whatever the worker left behind in its group (a wrapper script's children) goes too.
  ::killpg(pid, SIGKILL);
  if (guardian_ != nullptr) guardian_->forget_group(pid);
  it->second->released = true;
  boost::system::error_code ec;
  it->second->out.close(ec);
  it->second->err.close(ec);
  children_.erase(it);
}

}  // namespace ddp::launcher
