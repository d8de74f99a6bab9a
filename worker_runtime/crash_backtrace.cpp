#include "worker_runtime/crash_backtrace.hpp"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <boost/stacktrace.hpp>
#include <sstream>
#include <string>

namespace ddp::worker_runtime {

namespace {

int g_rank = -1;

void write_all(const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(2, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

void on_fatal_signal(int sig) {
  // Not async-signal-safe (symbolising allocates), as with every crash handler that
  // symbolises: the process is dying anyway, and the backtrace is what the user needs.
  std::ostringstream out;
  out << "*** rank " << g_rank << " (pid " << ::getpid() << ") received " << ::strsignal(sig)
      << "; backtrace:\n"
      << boost::stacktrace::stacktrace();
  write_all(out.str());
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void install_crash_backtrace(int rank) {
  const char* off = ::getenv("DDPLAUNCH_BACKTRACE");
  if (off != nullptr && std::string(off) == "0") return;
  g_rank = rank;
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) {
    struct sigaction current {};
    if (::sigaction(sig, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) continue;
    struct sigaction action {};
    action.sa_handler = on_fatal_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND | SA_NODEFER;
    ::sigaction(sig, &action, nullptr);
  }
}

}  // namespace ddp::worker_runtime
