#include "launcher/process/proc_status.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <limits>

#include "common/parse_int.hpp"

namespace ddp::launcher {

namespace {

// Threads describe() lists before it counts the rest.
constexpr size_t kMaxDescribedThreads = 64;

// The file's first bytes (stat and wchan are short), or nullopt when it cannot be read.
std::optional<std::string> read_small_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::array<char, 4096> buffer{};
  std::string text;
  for (;;) {
    ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n > 0) {
      text.append(buffer.data(), static_cast<size_t>(n));
      if (text.size() < 65536) continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  int err = errno;
  ::close(fd);
  // A read that fails (ESRCH: the task is being torn down) counts as unreadable.
  if (text.empty()) {
    errno = err;
    return std::nullopt;
  }
  return text;
}

std::optional<int> parse_id(std::string_view text) {
  int value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || value <= 0) {
    return std::nullopt;
  }
  return value;
}

// The thread ids under /proc/<pid>/task, sorted; nullopt when the directory is gone.
std::optional<std::vector<int>> list_tasks(const std::string& dir) {
  DIR* handle = ::opendir(dir.c_str());
  if (handle == nullptr) return std::nullopt;
  std::vector<int> tids;
  while (const dirent* entry = ::readdir(handle)) {
    if (auto tid = parse_id(entry->d_name)) tids.push_back(*tid);
  }
  ::closedir(handle);
  std::sort(tids.begin(), tids.end());
  return tids;
}

}  // namespace

bool parse_proc_stat(std::string_view text, std::string* comm, char* state, int* ppid, int* pgrp) {
  size_t open = text.find('(');
  size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open ||
      close + 2 >= text.size() || text[close + 1] != ' ') {
    return false;
  }
  *comm = std::string(text.substr(open + 1, close - open - 1));
  *state = text[close + 2];
  if (*state == ' ' || *state == '\n') return false;
  // " S 1 1234 ...": the parent, then the process group, each after one space.
  std::string_view rest = text.substr(std::min(text.size(), close + 4));
  for (int* field : {ppid, pgrp}) {
    if (field == nullptr) break;
    const size_t end = std::min(rest.size(), rest.find(' '));
    auto value = try_parse_int(rest.substr(0, end), 0, std::numeric_limits<int>::max());
    if (!value) return false;
    *field = static_cast<int>(*value);
    rest.remove_prefix(std::min(rest.size(), end + 1));
  }
  return true;
}

std::optional<ProcStat> read_proc_stat(int pid) {
  if (pid <= 0) return std::nullopt;
  auto text = read_small_file("/proc/" + std::to_string(pid) + "/stat");
  ProcStat stat;
  if (!text || !parse_proc_stat(*text, &stat.comm, &stat.state, &stat.ppid, &stat.pgrp)) {
    return std::nullopt;
  }
  return stat;
}

std::optional<ProcStatus> read_proc_status(int pid) {
  if (pid <= 0) return std::nullopt;
  const std::string dir = "/proc/" + std::to_string(pid);
  ProcStatus status;
  status.pid = pid;
  std::string comm;
  auto stat = read_small_file(dir + "/stat");
  if (!stat || !parse_proc_stat(*stat, &comm, &status.state)) return std::nullopt;

  auto tids = list_tasks(dir + "/task");
  if (!tids) {
    status.state = 0;  // gone between the two reads
    return status;
  }
  for (int tid : *tids) {
    const std::string task = dir + "/task/" + std::to_string(tid);
    ThreadStatus thread;
    thread.tid = tid;
    auto thread_stat = read_small_file(task + "/stat");
    if (!thread_stat || !parse_proc_stat(*thread_stat, &thread.name, &thread.state)) continue;
    if (auto wchan = read_small_file(task + "/wchan")) {
      thread.wchan = *wchan;
      while (!thread.wchan.empty() && (thread.wchan.back() == '\n' || thread.wchan.back() == ' ')) {
        thread.wchan.pop_back();
      }
      if (thread.wchan == "0") thread.wchan.clear();  // running: no wait channel
    }
    status.threads.push_back(std::move(thread));
  }
  // Every thread gone (the main thread lingers while any other lives): the process is.
  if (status.threads.empty() && ::access(dir.c_str(), F_OK) != 0) status.state = 0;
  return status;
}

std::string describe(const ProcStatus& status) {
  if (status.state == 0) return "pid " + std::to_string(status.pid) + " gone";
  std::string text;
  size_t shown = std::min(status.threads.size(), kMaxDescribedThreads);
  for (size_t i = 0; i < shown; ++i) {
    const ThreadStatus& thread = status.threads[i];
    if (!text.empty()) text += '\n';
    text += "tid " + std::to_string(thread.tid) + " (" + thread.name + ") state " +
            std::string(1, thread.state == 0 ? '?' : thread.state) + " wchan " +
            (thread.wchan.empty() ? "-" : thread.wchan);
  }
  if (status.threads.size() > shown) {
    text += "\n... and " + std::to_string(status.threads.size() - shown) + " more threads";
  }
  if (text.empty()) {
    text = "pid " + std::to_string(status.pid) + " state " + std::string(1, status.state) +
           " (no thread readable)";
  }
  return text;
}

}  // namespace ddp::launcher
