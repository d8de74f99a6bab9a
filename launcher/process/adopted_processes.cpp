#include "launcher/process/adopted_processes.hpp"

#include <dirent.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <thread>

#include "launcher/process/proc_status.hpp"

namespace ddp::launcher {
namespace {

// A daemon that forks a daemon that forks...: each round adopts the next generation.
constexpr int kMaxRounds = 8;
constexpr auto kDieWait = std::chrono::milliseconds(1000);

std::vector<std::pair<pid_t, ProcStat>> children_of(pid_t parent) {
  std::vector<std::pair<pid_t, ProcStat>> children;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return children;
  while (dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || pid <= 0) continue;
    auto stat = read_proc_stat(static_cast<int>(pid));
    if (stat && stat->ppid == parent) children.emplace_back(static_cast<pid_t>(pid), *stat);
  }
  ::closedir(proc);
  return children;
}

}  // namespace

bool become_child_subreaper() {
  return ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0;
}

std::vector<AdoptedProcess> stop_adopted_children(const std::function<bool(pid_t)>& known,
                                                  const std::function<bool(pid_t)>& worker_group) {
  std::vector<AdoptedProcess> stopped;
  const pid_t self = ::getpid();
  for (int round = 0; round < kMaxRounds; ++round) {
    std::vector<pid_t> victims;
    for (const auto& [pid, stat] : children_of(self)) {
      if (known(pid)) continue;
      if (stat.state != 'Z') {
        if (!worker_group(stat.pgrp)) stopped.push_back({pid, stat.comm});
        // Its own group too (a daemon that leads one), then the process itself.
        if (::getpgid(pid) == pid) ::killpg(pid, SIGKILL);
        ::kill(pid, SIGKILL);
      }
      victims.push_back(pid);
    }
    if (victims.empty()) break;
    const auto deadline = std::chrono::steady_clock::now() + kDieWait;
    for (pid_t pid : victims) {
      // Only these pids: the workers are reaped by their own watchers.
      while (::waitpid(pid, nullptr, WNOHANG) == 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  }
  return stopped;
}

}  // namespace ddp::launcher
