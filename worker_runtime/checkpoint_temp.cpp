#include "worker_runtime/checkpoint_temp.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <filesystem>

#include "common/error.hpp"

namespace ddp::worker_runtime {
namespace {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

bool all_digits(const std::string& text) {
  return !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
}

// True when fd and name are the same file (nobody replaced or removed the name).
bool same_file(int fd, const std::string& name) {
  struct stat by_fd {};
  struct stat by_name {};
  return ::fstat(fd, &by_fd) == 0 && ::lstat(name.c_str(), &by_name) == 0 &&
         by_fd.st_dev == by_name.st_dev && by_fd.st_ino == by_name.st_ino;
}

// Removes name if its writer's lock is free (it is gone). The lock is taken first and the
// name checked under it, so a live writer's file is never removed.
bool remove_if_unlocked(const std::string& name) {
  int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;
  bool removed =
      ::flock(fd, LOCK_EX | LOCK_NB) == 0 && same_file(fd, name) && ::unlink(name.c_str()) == 0;
  ::close(fd);
  return removed;
}

// Written before temp files were locked: only the pid tells whether the writer lives.
bool remove_if_pid_gone(const std::string& name, const std::string& pid_text) {
  pid_t pid = 0;
  try {
    pid = static_cast<pid_t>(std::stol(pid_text));
  } catch (const std::exception&) {
    return false;
  }
  if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) return false;
  return ::unlink(name.c_str()) == 0;
}

}  // namespace

std::string checkpoint_temp_path(const std::string& path) {
  return path + ".tmp." + host_name() + "." + std::to_string(::getpid());
}

int open_checkpoint_temp(const std::string& temp_path) {
  for (int attempt = 0;; ++attempt) {
    int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw CheckpointError("cannot create " + temp_path + ": " + errno_text(errno));
    // Filesystems without flock (ENOLCK, EOPNOTSUPP) just leave the file unlocked: cleaners
    // cannot lock it either, so they leave it alone.
    if (::flock(fd, LOCK_EX) != 0 || same_file(fd, temp_path)) return fd;
    // A cleaner took the fresh, not yet locked file for a dead writer's and removed it.
    ::close(fd);
    if (attempt == 3) {
      throw CheckpointError("cannot create " + temp_path + ": removed by another process");
    }
  }
}

int remove_stale_checkpoint_temps(const std::string& path) {
  const std::filesystem::path target(path);
  const std::string prefix = target.filename().string() + ".tmp.";
  const std::string host = host_name();
  const std::string own = checkpoint_temp_path(path);
  const auto dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  int removed = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string file = it->path().filename().string();
    const std::string name = it->path().string();
    if (!file.starts_with(prefix) || name == own) continue;
    const std::string rest = file.substr(prefix.size());  // <host>.<pid> or <pid>
    if (all_digits(rest)) {
      removed += remove_if_pid_gone(name, rest) ? 1 : 0;
      continue;
    }
    auto dot = rest.rfind('.');
    if (dot == std::string::npos || rest.substr(0, dot) != host) continue;
    if (!all_digits(rest.substr(dot + 1))) continue;
    removed += remove_if_unlocked(name) ? 1 : 0;
  }
  return removed;
}

}  // namespace ddp::worker_runtime
