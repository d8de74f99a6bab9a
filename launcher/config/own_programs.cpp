#include "launcher/config/own_programs.hpp"

namespace ddp::launcher {

std::vector<std::filesystem::path> own_program_dirs(const std::filesystem::path& exe) {
  std::error_code ec;
  auto binary = std::filesystem::canonical(exe, ec);
  if (ec) return {};
  auto dir = binary.parent_path();
  std::vector<std::filesystem::path> dirs;
  // cmake/Install.cmake: bin/ddplaunch and libexec/ddplaunch/train under one prefix.
  auto libexec = dir.parent_path() / "libexec" / "ddplaunch";
  if (std::filesystem::is_directory(libexec, ec)) dirs.push_back(libexec);
  // The build tree puts every program in the top build directory (CMAKE_RUNTIME_OUTPUT_DIRECTORY).
  if (std::filesystem::exists(dir / "CMakeCache.txt", ec)) dirs.push_back(dir);
  return dirs;
}

}  // namespace ddp::launcher
