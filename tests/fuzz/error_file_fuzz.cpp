// libFuzzer target: the agent's reader of TORCHELASTIC_ERROR_FILE
// (launcher/output/error_report.hpp), and the failure summary built from what it read. Any file
// content is read (nullopt when it is not PyTorch's format, never an exception) and summarised
// without a crash. An input whose first byte is 0x01 is instead a message the worker runtime
// records (worker_runtime/error_file.hpp): what it writes must read back.
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "launcher/output/error_report.hpp"
#include "worker_runtime/error_file.hpp"

namespace {

std::string temp_path() {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/ddp_error_file_fuzz." +
         std::to_string(::getpid()) + ".json";
}

}  // namespace

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry points are named so
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string kPath = temp_path();
  const bool worker_written = size > 0 && data[0] == 1;
  {
    std::ofstream out(kPath, std::ios::binary | std::ios::trunc);
    if (worker_written) {
      const std::string message(reinterpret_cast<const char*>(data) + 1, size - 1);
      out << ddp::worker_runtime::error_file_json(message, message, 1700000000) << "\n";
    } else {
      out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    }
  }
  auto content = ddp::launcher::read_error_file(kPath);
  if (!content) {
    if (worker_written) std::abort();  // the agent cannot read what a worker wrote
    return 0;
  }
  std::vector<ddp::launcher::WorkerFailure> failures(2);
  failures[0].rank = 1;
  failures[0].observed = std::chrono::system_clock::now();
  failures[0].error = content;
  failures[1].observed = std::chrono::system_clock::time_point{};
  failures[1].error = content;
  failures[1].status.exit_code = 1;
  (void)ddp::launcher::root_cause_index(failures);
  const auto summary = ddp::launcher::format_failure_summary("ddplaunch", "host", failures);
  if (summary.empty()) std::abort();
  return 0;
}
