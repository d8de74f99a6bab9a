#include "launcher/process/worker_group.hpp"

#include <algorithm>
#include <csignal>

#include "common/log.hpp"
#include "launcher/process/exit_status.hpp"

namespace ddp::launcher {

WorkerGroup::WorkerGroup(boost::asio::io_context& io, WorkerSpawner& spawner,
                         WorkerGroupOptions options)
    : io_(io), spawner_(spawner), options_(std::move(options)), kill_timer_(io) {
  if (!options_.read_proc) options_.read_proc = read_proc_status;
}

void WorkerGroup::reset(size_t count) {
  ++generation_;
  slots_.assign(count, Slot{});
  running_ = 0;
}

int WorkerGroup::start(size_t index, const WorkerProcessSpec& spec, WorkerCallbacks callbacks) {
  slots_.at(index).running = false;
  const int pid = spawner_.spawn(spec, tracked(index, std::move(callbacks)));
  mark_running(index, pid);
  return pid;
}

WorkerCallbacks WorkerGroup::adopt(size_t index, int pid, WorkerCallbacks callbacks) {
  slots_.at(index).running = false;
  auto tracked_callbacks = tracked(index, std::move(callbacks));
  mark_running(index, pid);
  return tracked_callbacks;
}

WorkerCallbacks WorkerGroup::tracked(size_t index, WorkerCallbacks callbacks) {
  auto on_exit = std::move(callbacks.on_exit);
  callbacks.on_exit = [this, generation = generation_, index,
                       on_exit = std::move(on_exit)](ExitStatus status) {
    if (generation != generation_ || index >= slots_.size() || !slots_[index].running) return;
    slots_[index].running = false;
    --running_;
    if (on_exit) on_exit(status);
  };
  return callbacks;
}

void WorkerGroup::mark_running(size_t index, int pid) {
  auto& slot = slots_.at(index);
  slot.pid = pid;
  slot.running = true;
  ++running_;
}

std::string WorkerGroup::running_pids() const {
  std::string pids;
  for (const auto& slot : slots_) {
    if (!slot.running) continue;
    pids += (pids.empty() ? "" : ", ") + std::to_string(slot.pid);
  }
  return pids.empty() ? "none running" : pids;
}

void WorkerGroup::signal(size_t index, int sig) {
  const auto& slot = slots_.at(index);
  if (slot.running) spawner_.signal_group(slot.pid, sig);
}

void WorkerGroup::signal_process(size_t index, int sig) {
  const auto& slot = slots_.at(index);
  if (slot.running) spawner_.signal_process(slot.pid, sig);
}

void WorkerGroup::signal_all(int sig) {
  for (const auto& slot : slots_) {
    if (slot.running) spawner_.signal_group(slot.pid, sig);
  }
}

void WorkerGroup::stop(int sig,
                       std::function<void(const std::vector<UnkillableWorker>&)> on_unkillable) {
  const uint64_t stop = ++stop_;
  stop_signal_ = sig;
  signal_all(sig);
  if (running_ == 0) return;
  kill_after_grace(stop, std::move(on_unkillable));
}

void WorkerGroup::cancel_stop() {
  ++stop_;
  kill_timer_.cancel();
}

void WorkerGroup::kill_after_grace(
    uint64_t stop, std::function<void(const std::vector<UnkillableWorker>&)> on_unkillable) {
  kill_timer_.expires_after(options_.stop_timeout);
  kill_timer_.async_wait(
      [this, stop, on_unkillable = std::move(on_unkillable)](boost::system::error_code ec) mutable {
        if (ec || stop != stop_) return;
        DDP_LOG_WARN("workers still running " + std::to_string(options_.stop_timeout.count()) +
                     " ms after " + signal_name(stop_signal_) + "; sending SIGKILL");
        signal_all(SIGKILL);
        give_up_later(stop, std::move(on_unkillable));
      });
}

void WorkerGroup::give_up_later(
    uint64_t stop, std::function<void(const std::vector<UnkillableWorker>&)> on_unkillable) {
  // SIGKILL ends any process except one in an uninterruptible wait (state D: a hung driver
  // or file system). Those are reported and no longer waited for, so the agent goes on.
  kill_timer_.expires_after(std::max(options_.stop_timeout, options_.unkillable_grace));
  kill_timer_.async_wait(
      [this, stop, on_unkillable = std::move(on_unkillable)](boost::system::error_code ec) {
        if (ec || stop != stop_) return;
        std::vector<UnkillableWorker> gone;
        for (size_t index = 0; index < slots_.size(); ++index) {
          auto& slot = slots_[index];
          if (!slot.running) continue;
          gone.push_back({index, slot.pid, options_.read_proc(slot.pid)});
          slot.running = false;
          --running_;
        }
        if (on_unkillable) on_unkillable(gone);
      });
}

void WorkerGroup::release(size_t index) {
  const auto& slot = slots_.at(index);
  if (slot.pid > 0) spawner_.release(slot.pid);
}

void WorkerGroup::release_all() {
  for (const auto& slot : slots_) {
    if (slot.pid > 0) spawner_.release(slot.pid);
  }
}

}  // namespace ddp::launcher
