#include "cluster_job.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace ddp::test {

ClusterJob::ClusterJob(const NetnsCluster& cluster)
    : cluster_(cluster), wake_fd_(::eventfd(0, EFD_CLOEXEC)) {
  if (wake_fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  watcher_ = std::thread([this] { watch(); });
}

ClusterJob::~ClusterJob() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto written = ::write(wake_fd_, &one, sizeof(one));
  watcher_.join();
  for (auto& entry : entries_) {
    entry->process.reset();  // SIGKILL + reap when still running
    ::close(entry->pidfd);
  }
  ::close(wake_fd_);
}

std::size_t ClusterJob::start(std::size_t host, const std::vector<std::string>& args,
                              const std::map<std::string, std::string>& env) {
  auto entry = std::make_unique<Entry>();
  entry->host = host;
  const std::lock_guard lock(mutex_);
  const std::size_t index = entries_.size();
  {
    const auto inside = cluster_.host(host).enter();
    entry->process = std::make_unique<AgentProcess>(
        args, env, dir_.file("agent" + std::to_string(index) + ".log"));
  }
  // The syscall: glibc 2.36's <sys/pidfd.h> declares pidfd_open without C linkage.
  entry->pidfd = static_cast<int>(::syscall(SYS_pidfd_open, entry->process->pid(), 0));
  if (entry->pidfd < 0)
    throw std::runtime_error(std::string("pidfd_open: ") + std::strerror(errno));
  entries_.push_back(std::move(entry));
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto written = ::write(wake_fd_, &one, sizeof(one));
  return index;
}

void ClusterJob::watch() {
  std::vector<pollfd> fds;
  std::vector<std::size_t> indices;  // fds[k + 1] watches entries_[indices[k]]
  for (;;) {
    fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
    indices.clear();
    {
      const std::lock_guard lock(mutex_);
      if (stopping_) return;
      for (std::size_t i = 0; i < entries_.size(); ++i) {
        if (entries_[i]->exited_at) continue;
        fds.push_back(pollfd{entries_[i]->pidfd, POLLIN, 0});
        indices.push_back(i);
      }
    }
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    const auto now = Clock::now();
    if ((fds[0].revents & POLLIN) != 0) {
      std::uint64_t count = 0;
      [[maybe_unused]] const auto got = ::read(wake_fd_, &count, sizeof(count));
    }
    const std::lock_guard lock(mutex_);
    for (std::size_t k = 0; k < indices.size(); ++k) {
      if (fds[k + 1].revents != 0) entries_[indices[k]]->exited_at = now;
    }
    exited_.notify_all();
  }
}

std::size_t ClusterJob::size() const {
  const std::lock_guard lock(mutex_);
  return entries_.size();
}

AgentProcess& ClusterJob::agent(std::size_t index) {
  const std::lock_guard lock(mutex_);
  return *entries_.at(index)->process;
}

std::size_t ClusterJob::host_of(std::size_t index) const {
  const std::lock_guard lock(mutex_);
  return entries_.at(index)->host;
}

std::optional<int> ClusterJob::wait(std::size_t index, std::chrono::milliseconds guard) {
  std::unique_lock lock(mutex_);
  Entry& entry = *entries_.at(index);
  if (!exited_.wait_for(lock, guard, [&] { return entry.exited_at.has_value(); })) {
    return std::nullopt;
  }
  lock.unlock();
  // It has exited (the pidfd said so): this reaps it and reads the status.
  const auto code = entry.process->wait(std::chrono::seconds(5));
  lock.lock();
  entry.exit_code = code;
  return code;
}

std::vector<std::optional<int>> ClusterJob::wait_all(std::chrono::milliseconds guard) {
  const auto deadline = Clock::now() + guard;
  std::vector<std::optional<int>> codes;
  for (std::size_t i = 0; i < size(); ++i) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    codes.push_back(wait(i, std::max(left, std::chrono::milliseconds(0))));
  }
  return codes;
}

std::optional<ClusterJob::Clock::time_point> ClusterJob::exited_at(std::size_t index) const {
  const std::lock_guard lock(mutex_);
  return entries_.at(index)->exited_at;
}

std::optional<std::chrono::milliseconds> ClusterJob::exit_spread() const {
  const std::lock_guard lock(mutex_);
  if (entries_.empty()) return std::nullopt;
  auto first = Clock::time_point::max();
  auto last = Clock::time_point::min();
  for (const auto& entry : entries_) {
    if (!entry->exited_at) return std::nullopt;
    first = std::min(first, *entry->exited_at);
    last = std::max(last, *entry->exited_at);
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(last - first);
}

std::string ClusterJob::log(std::size_t index) const {
  const std::lock_guard lock(mutex_);
  return entries_.at(index)->process->log();
}

std::string ClusterJob::logs() const {
  const std::lock_guard lock(mutex_);
  std::string out;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const Entry& entry = *entries_[i];
    out += "--- agent " + std::to_string(i) + " on host " + std::to_string(entry.host) + " (" +
           cluster_.host(entry.host).addr() + "): " +
           (entry.exit_code   ? "exit " + std::to_string(*entry.exit_code)
            : entry.exited_at ? std::string("exited")
                              : std::string("still running")) +
           " ---\n" + entry.process->log();
  }
  return out;
}

}  // namespace ddp::test
