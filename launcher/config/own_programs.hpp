#pragma once
// Where ddplaunch finds its own programs (the `train` example trainer) when PATH does not
// have them: the installed libexec directory next to its bin/, or the build tree it runs from.
// `ddplaunch --nproc_per_node=2 train` then works from anywhere, installed or not, without
// putting a program with so generic a name on PATH.
#include <filesystem>
#include <vector>

namespace ddp::launcher {

// The directories searched after PATH, in order: <prefix>/libexec/ddplaunch for an installed
// <prefix>/bin/ddplaunch, and the directory of the running binary when it is a CMake build
// tree (it holds CMakeCache.txt). exe is the running binary (default: /proc/self/exe).
std::vector<std::filesystem::path> own_program_dirs(
    const std::filesystem::path& exe = "/proc/self/exe");

}  // namespace ddp::launcher
