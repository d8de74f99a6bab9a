#include "worker_runtime/crash_backtrace.hpp"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <boost/stacktrace.hpp>
#include <mutex>
#include <sstream>
#include <string>

namespace ddp::worker_runtime {

namespace {

// Atomic: ranks that are threads of one process (tests) each call install_crash_backtrace;
// lock-free, so the signal handler may read it.
std::atomic<int> g_rank{-1};
constexpr int kSignals[] = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL};
// The handler each signal had before (run_main's error-file writer): called after ours.
struct sigaction g_previous[NSIG];

void write_all(const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(2, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// Symbolising allocates; a crash inside malloc (heap corruption) would block it forever. The
// watchdog ends the process with the original signal if printing takes this long.
constexpr unsigned kPrintBudgetSeconds = 5;
volatile sig_atomic_t g_fatal_signal = 0;

void on_watchdog(int) {
  // The fatal signal is blocked while its handler runs: unblock it, or raising would wait.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, g_fatal_signal);
  ::signal(g_fatal_signal, SIG_DFL);
  ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
  ::raise(g_fatal_signal);
}

void on_fatal_signal(int sig) {
  // A second fatal signal while printing (a crash in the printing itself) kills at once.
  for (int other : kSignals) ::signal(other, SIG_DFL);
  g_fatal_signal = sig;
  ::signal(SIGALRM, on_watchdog);
  ::alarm(kPrintBudgetSeconds);
  // Not async-signal-safe (symbolising allocates), as with every crash handler that
  // symbolises: the process is dying anyway, and the backtrace is what the user needs.
  std::ostringstream out;
  out << "*** rank " << g_rank.load() << " (pid " << ::getpid() << ") received " << ::strsignal(sig)
      << "; backtrace:\n"
      << boost::stacktrace::stacktrace();
  write_all(out.str());
  ::alarm(0);
  const auto& previous = g_previous[sig];
  if ((previous.sa_flags & SA_SIGINFO) == 0 && previous.sa_handler != SIG_DFL &&
      previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);  // e.g. writes the error file, then re-raises
    return;
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void install_crash_backtrace(int rank) {
  const char* off = ::getenv("DDPLAUNCH_BACKTRACE");
  if (off != nullptr && std::string(off) == "0") return;
  g_rank = rank;
  // One installer at a time: ranks that are threads of one process would otherwise both see
  // the old handler and both overwrite g_previous.
  static std::mutex installing;
  const std::lock_guard lock(installing);
  for (int sig : kSignals) {
    struct sigaction current {};
    if (::sigaction(sig, nullptr, &current) != 0) continue;
    if (current.sa_handler == on_fatal_signal) continue;  // installed already
    if ((current.sa_flags & SA_SIGINFO) != 0 || current.sa_handler == SIG_IGN) continue;
    g_previous[sig] = current;
    struct sigaction action {};
    action.sa_handler = on_fatal_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;
    ::sigaction(sig, &action, nullptr);
  }
}

}  // namespace ddp::worker_runtime
