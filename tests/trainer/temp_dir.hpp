#pragma once
// A fresh directory under /tmp removed (with its contents) when the test ends.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace ddp::trainer::test {

class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "ddp_trainer_test_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  // path()/name as a string.
  [[nodiscard]] std::string file(const std::string& name) const { return (path_ / name).string(); }
  // Writes text to path()/name and returns the full path.
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
    return file(name);
  }

 private:
  std::filesystem::path path_;
};

}  // namespace ddp::trainer::test
