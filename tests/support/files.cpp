#include "tests/support/files.hpp"

#include <fstream>
#include <sstream>

namespace ddp::test {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

std::string build_path(const std::string& relative) {
  return std::string(DDP_BINARY_DIR) + "/" + relative;
}

std::string source_path(const std::string& relative) {
  return std::string(DDP_SOURCE_DIR) + "/" + relative;
}

}  // namespace ddp::test
