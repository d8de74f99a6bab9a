#pragma once
// A native worker that dies of a fatal signal prints where it was: a symbolised backtrace
// (Boost.Stacktrace) of the thread that took the signal, on stderr, which the agent keeps
// for the failure summary. SIGABRT is also the signal the agent sends a hung rank before
// killing it (docs/hangs.md), as PYTHONFAULTHANDLER makes Python workers print theirs.
// Installed by init() for SIGABRT, SIGSEGV, SIGBUS, SIGFPE and SIGILL (not over a handler
// taking siginfo or an ignored signal); DDPLAUNCH_BACKTRACE=0 turns it off. The handler
// prints once, then runs the handler that was there before (run_main's error-file writer,
// which re-raises) or re-raises itself, so the exit status still names the signal.
namespace ddp::worker_runtime {

void install_crash_backtrace(int rank);

}  // namespace ddp::worker_runtime
