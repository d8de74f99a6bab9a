#pragma once
// Which PyTorch a Python worker will import, read from its files (no interpreter is started:
// that would cost a launch tens of milliseconds). Used for one thing: the name of NCCL's
// async error handling variable that the workers' PyTorch reads (worker_command.cpp).
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/environment.hpp"

namespace ddp::launcher {

// The directories python_exec would search for `torch`, in its order: PYTHONPATH, then for a
// virtual environment (pyvenv.cfg beside its bin/) its site-packages, and its base
// interpreter's when include-system-site-packages is true; else the user site
// (~/.local/lib/pythonX.Y/site-packages), the prefix's site-packages, Debian's
// dist-packages (prefix/local/lib/pythonX.Y, prefix/lib/python3). pythonX.Y comes from the
// interpreter's resolved file name (python3 -> python3.11); when it does not say, every
// pythonX.Y directory that exists.
std::vector<std::filesystem::path> python_search_path(const std::filesystem::path& interpreter,
                                                      const Environment& env);

// The major version in `__version__ = '2.15.0+cu132'` of version.py's text; nullopt when
// there is no such line.
std::optional<int> parse_torch_major(const std::string& version_py);

// The major version of the first torch/version.py on python_search_path(interpreter); nullopt
// when there is none or it cannot be read.
std::optional<int> worker_torch_major(const std::filesystem::path& interpreter,
                                      const Environment& env);

}  // namespace ddp::launcher
