#pragma once
// Runs a program (usually build/ddplaunch) for multi-process tests: output captured in
// temporary files, a deadline on every wait, and SIGKILL + reap in the destructor so a
// failing test leaves nothing running.
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ddp::launcher::testing {

struct ChildOptions {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // added to (or replacing) the test's environment
  bool ignore_sighup = false;              // as nohup does
};

class ChildProcess {
 public:
  explicit ChildProcess(const ChildOptions& options);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }
  // Waits up to timeout; the shell-style status (128+N for signal N), nullopt on timeout.
  std::optional<int> wait_for(std::chrono::milliseconds timeout);
  [[nodiscard]] std::string out() const;
  [[nodiscard]] std::string err() const;

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  std::filesystem::path out_path_;
  std::filesystem::path err_path_;
};

// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// True until pid has exited (a zombie counts as exited).
bool process_alive(pid_t pid);
// Polls pred every few ms until it holds or timeout passes; returns pred's last value.
bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout);
// The whole file as a string ("" when missing).
std::string read_text(const std::filesystem::path& path);
// build/ddplaunch and tests/launcher/workers/<name>.
std::string ddplaunch_path();
std::string worker_script(const std::string& name);

}  // namespace ddp::launcher::testing
