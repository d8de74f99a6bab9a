#include "tests/support/python.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <utility>

namespace ddp::test {

ProcessResult run_python(const std::vector<std::string>& args, std::chrono::milliseconds timeout) {
  std::vector<std::string> argv{kPython};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(std::move(argv), timeout);
}

bool python_can_import(const std::string& module) {
  // Importing torch takes seconds on a busy machine; 120 s only guards against a hang.
  return run_python({"-c", "import " + module}, std::chrono::seconds(120)).exit_code == 0;
}

namespace {

// "2.15.0" -> {2, 15}; a missing part counts as 0.
std::pair<int, int> major_minor(const std::string& version) {
  int major = 0;
  int minor = 0;
  char dot = 0;
  std::istringstream(version) >> major >> dot >> minor;
  return {major, minor};
}

// The marker scripts/setup_torch.sh writes once a venv's install and `import torch` succeeded.
constexpr const char* kVenvMarker = ".ddplaunch-complete";
constexpr const char* kDebianTorch = "/usr/lib/python3/dist-packages/torch/__init__.py";

}  // namespace

bool Torch::installed() const {
  namespace fs = std::filesystem;
  if (venv.empty()) {
    return fs::exists(python) && fs::exists(kDebianTorch);
  }
  return fs::exists(python) && fs::exists(fs::path(venv) / kVenvMarker);
}

bool Torch::at_least(int major, int minor) const {
  return major_minor(version) >= std::make_pair(major, minor);
}

std::string Torch::missing_message() const {
  if (venv.empty()) {
    return "torch " + version + ": " + python +
           " cannot import torch: run scripts/setup.sh (Debian's python3-torch)";
  }
  return "torch " + version + " is not installed in " + venv +
         " (no network when it was set up?): run scripts/setup_torch.sh";
}

std::string torch_venvs() {
  const char* dir = std::getenv("DDP_TORCH_VENVS");
  return dir != nullptr && *dir != '\0' ? dir : "/var/cache/ddplaunch/venvs";
}

const std::vector<Torch>& torches() {
  static const std::vector<Torch> all = [] {
    std::vector<Torch> list{{"1.13", kPython, ""}};
    // DDP_TORCH_VENV_VERSIONS: scripts/torch_versions.txt's versions, space-separated.
    std::istringstream versions(DDP_TORCH_VENV_VERSIONS);
    for (std::string version; versions >> version;) {
      const std::string venv = torch_venvs() + "/torch-" + version;
      list.push_back({version, venv + "/bin/python", venv});
    }
    std::stable_sort(list.begin(), list.end(), [](const Torch& a, const Torch& b) {
      return major_minor(a.version) < major_minor(b.version);
    });
    return list;
  }();
  return all;
}

}  // namespace ddp::test
