#pragma once
// Failure recording for native workers: the agent's summary reads TORCHELASTIC_ERROR_FILE,
// written in PyTorch's JSON format
//   {"message": {"message": ..., "extraInfo": {"py_callstack": ..., "timestamp": "<secs>"}}}
// by run_main() on an uncaught exception, or by a signal handler on a fatal signal.
#include <functional>
#include <string>

namespace ddp::worker_runtime {

// The JSON document PyTorch's ErrorHandler writes (pure, for tests).
std::string error_file_json(const std::string& message, const std::string& callstack,
                            long long timestamp);
// Writes the error file at path (TORCHELASTIC_ERROR_FILE when path is empty; nothing when
// both are empty). Returns true when a file was written; never throws.
bool record_error(const std::string& message, const std::string& callstack,
                  const std::string& path = "");
// Installs handlers for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT that write the error file
// (async-signal-safe) and re-raise the signal with its default action.
void install_fatal_signal_handlers();
// Runs fn(argc, argv): an uncaught exception is recorded ("<type>: <what>") and logged
// ("<program>: error: <type>: <what>"), and 1 is returned; fatal signals are recorded too. Returns
// fn's exit status.
int run_main(int argc, char** argv, const std::function<int(int, char**)>& fn);

}  // namespace ddp::worker_runtime
