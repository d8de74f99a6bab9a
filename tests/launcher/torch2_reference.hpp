#pragma once
// The torchrun 2.x the side-by-side tests compare ddplaunch against: the newest PyTorch of
// tests/support/python.hpp's torches() (scripts/torch_versions.txt, installed by
// scripts/setup_torch.sh with lightning and accelerate; 2.15.0 today). DDP_TORCH2_VENV names
// another venv.
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include "tests/support/python.hpp"
#include "tests/support/torch_test_case.hpp"  // kSkipped

namespace ddp::test {

inline Torch torch2() {
  const char* venv = std::getenv("DDP_TORCH2_VENV");
  if (venv != nullptr && *venv != '\0') {
    return {"DDP_TORCH2_VENV", std::string(venv) + "/bin/python", venv};
  }
  return torches().back();  // oldest first
}
inline std::string torch2_python() {
  return torch2().python;
}
inline std::string torch2_torchrun() {
  return torch2().venv + "/bin/torchrun";
}

// "" when the venv's torchrun is there, else why not. The tests FAIL with it: torchrun 2.x is
// the reference these tests exist for, never a silent skip.
inline std::string torch2_missing() {
  auto torch = torch2();
  if (!torch.venv.empty() && std::filesystem::exists(torch2_torchrun())) return {};
  return "torchrun 2.x (" + torch.version + "): " + torch2_torchrun() +
         " does not exist: run scripts/setup_torch.sh (or set DDP_TORCH2_VENV to a venv with "
         "torch 2.x)";
}

// Marks the running case skipped, for CTest too (tests/CMakeLists.txt matches kSkipped).
inline void report_skipped(const std::string& why) {
  std::cout << kSkipped << " " << why << std::endl;
}

}  // namespace ddp::test
