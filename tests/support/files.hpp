#pragma once
// Reading files a test or its children wrote, and finding the project's sources and build
// outputs (DDP_SOURCE_DIR / DDP_BINARY_DIR, fixed when the tests are configured).
#include <filesystem>
#include <string>

namespace ddp::test {

// The whole file as bytes ("" when it is missing or unreadable).
std::string read_file(const std::filesystem::path& path);
// <build dir>/relative, e.g. build_path("ddplaunch") or build_path("tests/rt_test_worker").
std::string build_path(const std::string& relative);
// <source dir>/relative, e.g. source_path("tests/launcher/workers/env_dump.sh").
std::string source_path(const std::string& relative);

}  // namespace ddp::test
