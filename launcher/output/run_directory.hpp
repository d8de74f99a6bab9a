#pragma once
// Where one run's files go: attempt_<n>/<local_rank>/{error.json,stdout.log,stderr.log}.
//  * --log_dir DIR: DIR/<run_id>_<random>/, as torchrun 1.13 does, so a second run with the
//    same DIR (and the default run id `none`) never overwrites the first. Kept.
//  * otherwise a private $TMPDIR/ddplaunch_<random>/, removed when the agent ends, except
//    after a failure whose error files the summary names. The agent holds a lock (flock) on
//    its .owner file for its whole life; the kernel drops it however the agent ends, so the
//    next agent removes the directories of agents that died without cleaning up (SIGKILL).
#include <filesystem>
#include <string>

#include "common/fd.hpp"
#include "launcher/config/launch_config.hpp"

namespace ddp::launcher {

class RunDirectory {
 public:
  // Creates the directory (a temporary one after removing stale ones, see
  // remove_stale_run_directories). Throws Error naming the path and the errno text.
  RunDirectory(const LaunchConfig& config, const std::string& run_id, const Environment& env);
  // Removes a temporary directory unless finish() kept it.
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  [[nodiscard]] bool temporary() const { return temporary_; }
  // At the end of the job: a temporary directory of a failed job (exit_status != 0) that
  // holds error files is kept, so the summary's error_file paths still exist; returns the
  // message saying so, for the log ("" when nothing is kept).
  std::string finish(int exit_status);

 private:
  std::filesystem::path path_;
  bool temporary_ = false;
  Fd owner_fd_;  // holds the flock on path_/.owner
};

// The directory temporary run directories go in: $TMPDIR, else /tmp.
std::filesystem::path temporary_root(const Environment& env);
// Removes root/ddplaunch_* directories of this user whose agent is gone: their .owner file is
// not locked. Directories without .owner (being created, kept after a failure, or made by a
// version before the lock) are left alone. Returns how many were removed.
int remove_stale_run_directories(const std::filesystem::path& root);

}  // namespace ddp::launcher
