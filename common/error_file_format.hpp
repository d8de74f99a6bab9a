#pragma once
// The error file: a worker-to-agent protocol like progress_protocol.hpp. A worker that fails
// writes one JSON document to $TORCHELASTIC_ERROR_FILE, in the layout of PyTorch's
// torch.distributed.elastic.multiprocessing.errors (`@record`), and the agent reads it back
// for the failure summary (launcher/output/error_report.hpp). Written here only: by native
// workers (worker_runtime/error_file.hpp) and by the agent for a hung rank's stack.
#include <string>

namespace ddp::error_file {

// {"message": {"message": <message>, "extraInfo": {"py_callstack": <callstack>,
// "timestamp": "<whole seconds since the epoch>"}}} on one line (PyTorch reads the timestamp
// with int()); invalid UTF-8 is replaced.
std::string to_json(const std::string& message, const std::string& callstack, long long timestamp);
// Writes to_json(message, callstack, now) and a newline to path (truncating it). false when
// the file cannot be written.
bool write(const std::string& path, const std::string& message, const std::string& callstack);

}  // namespace ddp::error_file
