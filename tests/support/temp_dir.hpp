#pragma once
// A fresh private directory for one test's files, removed (with its contents) on scope exit.
#include <filesystem>
#include <string>

namespace ddp::test {

class TempDir {
 public:
  // Creates <system temp dir>/ddp_test_XXXXXX (mkdtemp); throws naming the errno text.
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  // path()/name as a string.
  [[nodiscard]] std::string file(const std::string& name) const;
  // Writes bytes to path()/name (replacing it) and returns the full path.
  std::string write(const std::string& name, const std::string& bytes) const;

 private:
  std::filesystem::path path_;
};

}  // namespace ddp::test
