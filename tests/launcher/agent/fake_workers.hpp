#pragma once
// Test doubles for the agent: a WorkerSpawner whose "processes" are scripted by the test,
// and a RendezvousHandler that counts calls and can fail or report membership changes.
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "launcher/process/worker_spawner.hpp"
#include "rendezvous/rendezvous_handler.hpp"

namespace ddp::launcher::testing {

class FakeSpawner final : public WorkerSpawner {
 public:
  struct Worker {
    WorkerProcessSpec spec;
    WorkerCallbacks callbacks;
    int pid = 0;
    bool exited = false;
    bool released = false;
    std::vector<int> signals;
    // The worker's end of its recovery channel (a dup of spec.channel_fd), or -1.
    std::shared_ptr<int> channel;
  };

  explicit FakeSpawner(boost::asio::io_context& io) : io_(io) {}

  // Called (on the loop) right after worker `index` is spawned.
  std::function<void(size_t index)> on_spawn;
  // Called when a signal reaches worker `index`; default: it dies of any signal.
  std::function<void(size_t index, int sig)> on_signal = [this](size_t index, int sig) {
    exit(index, ExitStatus{0, sig});
  };

  // true -> the n-th spawn() call throws, as for a program that cannot be run.
  std::function<bool(size_t n)> fail_spawn;
  size_t spawn_calls = 0;

  int spawn(const WorkerProcessSpec& spec, WorkerCallbacks callbacks) override {
    if (fail_spawn && fail_spawn(spawn_calls++)) throw Error("fake spawn: cannot run the program");
    workers.push_back(Worker{spec, std::move(callbacks), next_pid++, false, false, {}, nullptr});
    if (spec.channel_fd >= 0) {
      // Kept open as a real worker would: the agent closes its copy after spawn().
      workers.back().channel = std::shared_ptr<int>(new int(::dup(spec.channel_fd)), [](int* fd) {
        if (*fd >= 0) ::close(*fd);
        delete fd;
      });
    }
    size_t index = workers.size() - 1;
    if (on_spawn) boost::asio::post(io_, [this, index] { on_spawn(index); });
    return workers.back().pid;
  }
  void signal_group(int pid, int sig) override {
    for (size_t i = 0; i < workers.size(); ++i) {
      if (workers[i].pid == pid && !workers[i].exited) {
        workers[i].signals.push_back(sig);
        boost::asio::post(io_, [this, i, sig] { on_signal(i, sig); });
      }
    }
  }
  void signal_process(int pid, int sig) override { signal_group(pid, sig); }
  void release(int pid) override {
    for (auto& worker : workers) {
      if (worker.pid == pid) worker.released = true;
    }
  }

  // Makes worker `index` print `text` on stream and exit with status (once).
  void exit(size_t index, ExitStatus status, const std::string& text = "") {
    auto& worker = workers.at(index);
    if (worker.exited) return;
    worker.exited = true;
    // The agent may start a fresh worker from on_exit (a restart, an in-place replacement):
    // the callbacks run from copies, never from the element being called through.
    const WorkerCallbacks callbacks = worker.callbacks;
    if (!text.empty()) callbacks.on_output(1, text);
    callbacks.on_exit(status);
  }
  // The value of NAME in worker `index`'s environment ("" when absent).
  std::string env(size_t index, const std::string& name) const {
    for (const auto& entry : workers.at(index).spec.env) {
      if (entry.starts_with(name + "=")) return entry.substr(name.size() + 1);
    }
    return "";
  }

  // The pid the next worker gets (a test may make it a real process's, e.g. its own, for
  // something that signals it beside the spawner: torch's file timer).
  int next_pid = 1000;
  // A deque: a spawn() from inside a callback (on_exit starting a fresh worker) leaves every
  // reference to an earlier worker valid, in the tests and above.
  std::deque<Worker> workers;

 private:
  boost::asio::io_context& io_;
};

class FakeRendezvous final : public rendezvous::RendezvousHandler {
 public:
  explicit FakeRendezvous(int nproc) : nproc_(nproc) {}

  rendezvous::RendezvousInfo next_rendezvous() override {
    int call = ++calls;
    if (on_call) on_call();
    if (block_until_shutdown) {
      // Like a multi-node round waiting for peers: only shutdown() ends it.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return shut_down.load(); });
    }
    if (fail_on_call == call) throw RendezvousError("fake rendezvous: 1/2 joined before timeout");
    if (shut_down) throw RendezvousClosed("fake rendezvous: closed");
    rendezvous::RendezvousInfo info;
    info.round = static_cast<uint64_t>(call - 1);
    info.world_size = nproc_;
    info.master_addr = "127.0.0.1";
    info.master_port = 29999;
    info.members = members;
    info.group_rank = group_rank;
    info.group_world_size = group_world_size;
    return info;
  }
  // A multi-node job's store, when the test gives one (job_store): the agent watches its
  // failure records there.
  std::shared_ptr<rendezvous::Store> connect_job_store() override {
    if (connect_job) return connect_job(++job_connects);
    return job_store;
  }
  void watch(std::function<void(rendezvous::MembershipChange)> on_change) override {
    std::lock_guard<std::mutex> lock(mu_);
    on_change_ = std::move(on_change);
  }
  void shutdown() override {
    std::unique_lock<std::mutex> lock(mu_);
    shut_down = true;
    cv_.notify_all();
    if (on_shutdown) on_shutdown();
    // Like the store host's exit barrier: only interrupt() ends it.
    if (block_exit_until_interrupt && !after_failure) {
      cv_.wait(lock, [this] { return interrupted.load(); });
    }
  }
  void interrupt() override {
    std::lock_guard<std::mutex> lock(mu_);
    interrupted = true;
    cv_.notify_all();
  }
  void shutdown_after_failure() override {
    after_failure = true;
    shutdown();
  }
  [[nodiscard]] std::string restart_blocker() override {
    ++restart_blocker_calls;
    if (on_restart_blocker) on_restart_blocker();
    std::lock_guard<std::mutex> lock(mu_);
    return blocker;
  }
  [[nodiscard]] std::string run_id() const override { return "fake-run"; }
  [[nodiscard]] rendezvous::RendezvousKind kind() const override {
    return {elastic, 1, group_world_size};
  }
  [[nodiscard]] rendezvous::ChangeReason last_change() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return reason_;
  }

  // Reports a membership change as the real handlers do (from "another thread"), with the
  // reason they give (the store's own error and what it means for kStoreLost).
  void change(rendezvous::MembershipChange change, const std::string& reason = "",
              PeerLoss loss = PeerLoss::kUnknown) {
    std::lock_guard<std::mutex> lock(mu_);
    reason_ = rendezvous::ChangeReason{reason, loss};
    if (on_change_) on_change_(change);
  }

  std::shared_ptr<rendezvous::Store> job_store;  // null: a single-node job
  // When set: what the n-th connect_job_store() call (from 1) returns instead of job_store (a
  // job's failure watch connects twice per attempt: to wait, then to publish).
  std::function<std::shared_ptr<rendezvous::Store>(int n)> connect_job;
  std::atomic<int> job_connects{0};
  int group_rank = 0;
  int group_world_size = 1;
  bool elastic = false;  // what kind() says: groups re-form (the dynamic rendezvous)
  std::atomic<int> calls{0};
  std::atomic<int> fail_on_call{0};
  std::atomic<bool> shut_down{false};
  std::atomic<bool> after_failure{false};  // closed by shutdown_after_failure()
  std::atomic<bool> block_until_shutdown{false};
  std::function<void()> on_call;      // runs on the rendezvous thread at each call
  std::function<void()> on_shutdown;  // runs in shutdown(), on the agent's exit thread
  std::atomic<bool> block_exit_until_interrupt{false};
  std::atomic<bool> interrupted{false};
  std::string members;  // RendezvousInfo::members of every round
  std::string blocker;  // what restart_blocker() says (set before run())
  std::atomic<int> restart_blocker_calls{0};
  std::function<void()> on_restart_blocker;  // runs on the agent's restart-check thread

 private:
  int nproc_;
  mutable std::mutex mu_;
  rendezvous::ChangeReason reason_;
  std::condition_variable cv_;
  std::function<void(rendezvous::MembershipChange)> on_change_;
};

}  // namespace ddp::launcher::testing
