// libFuzzer target: the checkpoint reader (worker_runtime/checkpoint.hpp). Any file content
// loads or is refused with CheckpointError; a crash, a sanitizer report, another exception
// (a JSON type error, bad_alloc from a forged shape) or a loaded tensor whose data does not
// match its shape is a bug.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "common/error.hpp"
#include "worker_runtime/checkpoint.hpp"

namespace {

// A directory of this process's own: load_checkpoint also sweeps stale temp files beside
// the checkpoint.
std::string make_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr ? tmp : "/tmp") + "/ddp_ckpt_fuzz.XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) std::abort();
  return pattern;
}

}  // namespace

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry points are named so
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string kPath = make_dir() + "/model.safetensors";
  {
    std::ofstream out(kPath, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const auto ckpt = ddp::worker_runtime::load_checkpoint(kPath);
    for (const auto& [name, tensor] : ckpt.tensors) {
      size_t count = 1;
      for (int64_t d : tensor.shape) {
        if (d < 0) std::abort();
        count *= static_cast<size_t>(d);
      }
      if (count != tensor.data.size()) std::abort();
    }
  } catch (const ddp::CheckpointError&) {
  }
  return 0;
}
