#include "server_process.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

#include "rendezvous/store/server/store_server.hpp"

namespace ddp::bench {
namespace {

// The child: serve until the parent closes the control pipe (or dies), then exit.
[[noreturn]] void serve(int control_read, int port_write) {
  int code = 0;
  try {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    rendezvous::StoreServerOptions server_options{"127.0.0.1", 0};
    // Every simulated node connects from 127.0.0.1: no per-address connection limit.
    server_options.limits.max_conns_per_peer = std::numeric_limits<size_t>::max();
    rendezvous::StoreServer server(server_options);
    const uint16_t port = server.port();
    if (::write(port_write, &port, sizeof(port)) != sizeof(port)) code = 1;
    ::close(port_write);
    char byte = 0;
    while (code == 0 && ::read(control_read, &byte, 1) < 0 && errno == EINTR) {
    }
    server.stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdzv_bench: store server: %s\n", e.what());
    code = 1;
  }
  std::fflush(stderr);
  ::_exit(code);
}

}  // namespace

ServerProcess::ServerProcess() {
  int control[2];
  int ready[2];
  if (::pipe2(control, O_CLOEXEC) != 0) throw std::runtime_error("rdzv_bench: pipe failed");
  if (::pipe2(ready, O_CLOEXEC) != 0) {
    ::close(control[0]);
    ::close(control[1]);
    throw std::runtime_error("rdzv_bench: pipe failed");
  }
  std::fflush(stdout);  // nothing buffered may be printed twice
  pid_ = ::fork();
  if (pid_ == 0) {
    ::close(control[1]);
    ::close(ready[0]);
    serve(control[0], ready[1]);
  }
  ::close(control[0]);
  ::close(ready[1]);
  control_ = control[1];
  const bool forked = pid_ > 0;
  const bool listening = forked && ::read(ready[0], &port_, sizeof(port_)) == sizeof(port_);
  ::close(ready[0]);
  if (!listening) {
    shut();
    throw std::runtime_error(forked ? "rdzv_bench: the store server process did not start"
                                    : "rdzv_bench: fork failed");
  }
}

ServerProcess::~ServerProcess() {
  shut();
}

double ServerProcess::cpu_seconds() const {
  // /proc/<pid>/stat: "pid (comm) state ..." with utime and stime the 14th and 15th fields.
  std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t comm_end = text.rfind(')');
  if (comm_end == std::string::npos) return 0;
  std::istringstream fields(text.substr(comm_end + 2));
  std::string field;
  unsigned long long utime = 0;
  unsigned long long stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

void ServerProcess::shut() {
  if (control_ >= 0) ::close(control_);
  control_ = -1;
  if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

}  // namespace ddp::bench
