#include "launcher/agent/worker_slots.hpp"

#include <csignal>
#include <utility>

namespace ddp::launcher {

void WorkerSlot::begin(int global_rank, const std::filesystem::path& dir) {
  rank = global_rank;
  hang.clear();
  culprit = false;
  dumping = false;
  std::filesystem::create_directories(dir);
  error_file = (dir / "error.json").string();
  std::filesystem::remove(error_file);
}

WorkerFailure assemble_failure(const WorkerSlot& slot, int pid, ExitStatus status,
                               std::vector<std::string> stderr_tail) {
  WorkerFailure failure;
  failure.rank = slot.rank;
  failure.local_rank = slot.local_rank;
  failure.pid = pid;
  failure.status = status;
  failure.observed = std::chrono::system_clock::now();
  failure.error_file = slot.error_file;
  failure.error = read_error_file(slot.error_file);
  failure.hang = slot.hang;
  failure.culprit = slot.culprit;
  if (status.signal != 0) failure.output_tail = std::move(stderr_tail);
  if (!failure.error && slot.culprit) {
    // A hung worker rarely records why it died: the agent does, so the error file (and
    // tools that read it) say "hang" with the stack it printed.
    std::string stack;
    for (const auto& line : failure.output_tail) stack += line + "\n";
    if (write_error_file(slot.error_file, "hang: " + slot.hang, stack)) {
      failure.error = read_error_file(slot.error_file);
      failure.output_tail.clear();  // it is the error file's traceback now
    }
  }
  return failure;
}

bool failed_on_its_own(const WorkerFailure& failure, int stop_signal) {
  const auto& status = failure.status;
  const bool our_signal = status.signal == stop_signal || status.signal == SIGKILL ||
                          (status.signal == 0 && status.exit_code == 128 + stop_signal);
  return failure.error || !our_signal || !failure.hang.empty();
}

}  // namespace ddp::launcher
