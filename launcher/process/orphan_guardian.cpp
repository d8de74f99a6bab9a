#include "launcher/process/orphan_guardian.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <set>

#include "common/error.hpp"
#include "launcher/config/signal_list.hpp"

namespace ddp::launcher {
namespace {

// The guardian's whole life: collect group ids until EOF, then kill them.
[[noreturn]] void guardian_main(int read_fd) {
  ::prctl(PR_SET_NAME, "ddplaunch-guard", 0, 0, 0);
  // Terminal signals reach the agent's process group; the guardian must survive them to
  // do its job, and the agent forwards them to workers itself (those of --signals_to_handle;
  // any other ends the agent, and then the guardian kills the workers).
  for (int sig : handleable_signals()) ::signal(sig, SIG_IGN);
  ::signal(SIGPIPE, SIG_IGN);
  std::set<int> groups;
  int record = 0;
  for (;;) {
    ssize_t n = ::read(read_fd, &record, sizeof(record));
    if (n == static_cast<ssize_t>(sizeof(record))) {
      if (record > 0) groups.insert(record);
      if (record < 0) groups.erase(-record);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // EOF (agent gone or done) or error: either way, clean up now
  }
  for (int pgid : groups) ::killpg(pgid, SIGKILL);
  ::_exit(0);
}

}  // namespace

OrphanGuardian::OrphanGuardian() {
  int fds[2];
  // A socket pair rather than a pipe: send(MSG_NOSIGNAL) cannot raise SIGPIPE in the agent.
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) {
    throw Error("orphan guardian: socketpair() failed: " + errno_text(errno));
  }
  pid_ = ::fork();
  if (pid_ < 0) {
    int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error("orphan guardian: fork() failed: " + errno_text(err));
  }
  if (pid_ == 0) {
    ::close(fds[1]);
    guardian_main(fds[0]);
  }
  ::close(fds[0]);
  write_fd_.reset(fds[1]);
}

OrphanGuardian::~OrphanGuardian() {
  write_fd_.reset();  // EOF: the guardian exits
  // The guardian exits as soon as it reads EOF, so this wait is short and bounded.
  while (pid_ > 0 && ::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
}

void OrphanGuardian::watch_group(pid_t pgid) {
  send(static_cast<int>(pgid));
}

void OrphanGuardian::forget_group(pid_t pgid) {
  send(-static_cast<int>(pgid));
}

void OrphanGuardian::send(int record) {
  // SEQPACKET keeps each 4-byte record whole; the guardian drains them at once, so this never
  // blocks for long. A failed write means the guardian is gone: nothing more to do.
  ssize_t n = 0;
  do {
    n = ::send(write_fd_.get(), &record, sizeof(record), MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
}

}  // namespace ddp::launcher
