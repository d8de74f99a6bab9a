#pragma once
// The Python the PyTorch-facing tests run: Debian's /usr/bin/python3 with python3-torch (not
// whatever python3 comes first on PATH).
#include <chrono>
#include <string>
#include <vector>

#include "tests/support/process.hpp"

namespace ddp::test {

inline constexpr const char* kPython = "/usr/bin/python3";

// Runs kPython with args (e.g. {"-c", code}) as run_process(argv, timeout) does.
ProcessResult run_python(const std::vector<std::string>& args, std::chrono::milliseconds timeout);
// True when kPython can `import module` (e.g. "torch.distributed") within 120 s.
bool python_can_import(const std::string& module);

}  // namespace ddp::test
