#pragma once
// The Pythons the PyTorch-facing tests run: Debian's /usr/bin/python3 with python3-torch 1.13
// (kPython, not whatever python3 comes first on PATH), and the PyTorch 2.x venvs that
// scripts/setup_torch.sh keeps for the versions in scripts/torch_versions.txt
// (docs/pytorch.md). tests/support/torch_test_case.hpp runs one scenario against each.
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

// One PyTorch the live tests run against.
struct Torch {
  std::string version;  // "1.13", "2.5.1", "2.15.0"
  std::string python;   // its interpreter: kPython, or <venv>/bin/python
  std::string venv;     // "" for Debian's python3-torch

  // Debian's: torch is in /usr/lib/python3/dist-packages. A venv: scripts/setup_torch.sh
  // finished it (its marker file is there), without starting Python.
  [[nodiscard]] bool installed() const;
  // version >= major.minor, e.g. at_least(2, 6): workers open a bare TCPStore.
  [[nodiscard]] bool at_least(int major, int minor) const;
  // Why it is missing and the command that installs it, naming the version.
  [[nodiscard]] std::string missing_message() const;
};

// Where the venvs live: $DDP_TORCH_VENVS, else /var/cache/ddplaunch/venvs.
std::string torch_venvs();
// Every PyTorch the live tests cover, oldest first: Debian's 1.13, then the versions of
// scripts/torch_versions.txt (read when CMake configures, so CTest lists one test per version).
const std::vector<Torch>& torches();

}  // namespace ddp::test
