#pragma once
// ddplaunch agents on the hosts of a NetnsCluster (tests/support/netns.hpp): one log per
// agent, its exit code, and the moment it exited. A watcher thread sees each exit through a
// pidfd as it happens, whatever the test is doing then, so tests can compare when nodes
// stopped to the millisecond ("every node within 100 ms of the first").
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agent_process.hpp"
#include "tests/support/netns.hpp"
#include "tests/support/temp_dir.hpp"

namespace ddp::test {

class ClusterJob {
 public:
  using Clock = std::chrono::steady_clock;

  explicit ClusterJob(const NetnsCluster& cluster);
  // SIGKILLs and reaps the agents still running; removes the logs.
  ~ClusterJob();
  ClusterJob(const ClusterJob&) = delete;
  ClusterJob& operator=(const ClusterJob&) = delete;

  // Starts `ddplaunch args...` inside host's network (its workers run there too) and
  // returns the agent's index (0, 1, ... in start order); env is added to the test's.
  std::size_t start(std::size_t host, const std::vector<std::string>& args,
                    const std::map<std::string, std::string>& env = {});
  [[nodiscard]] std::size_t size() const;
  [[nodiscard]] AgentProcess& agent(std::size_t index);
  // The host an agent was started on.
  [[nodiscard]] std::size_t host_of(std::size_t index) const;

  // Waits up to guard for agent index to exit: its exit code (128+N after signal N), nullopt
  // if it still runs at the deadline.
  std::optional<int> wait(std::size_t index, std::chrono::milliseconds guard);
  // Waits up to guard (in all) for every agent: their exit codes, in index order.
  std::vector<std::optional<int>> wait_all(std::chrono::milliseconds guard);
  // When agent index exited; nullopt while it runs.
  [[nodiscard]] std::optional<Clock::time_point> exited_at(std::size_t index) const;
  // Last exit minus first exit over every agent; nullopt while any runs.
  [[nodiscard]] std::optional<std::chrono::milliseconds> exit_spread() const;

  [[nodiscard]] std::string log(std::size_t index) const;
  // Every agent's log under a header "--- agent 1 on host 1 (10.x.y.2): exit 0 ---" (or
  // "still running"), for INFO().
  [[nodiscard]] std::string logs() const;

 private:
  struct Entry {
    std::size_t host = 0;
    std::unique_ptr<AgentProcess> process;
    int pidfd = -1;
    std::optional<Clock::time_point> exited_at;
    std::optional<int> exit_code;  // once a wait() reaped it
  };
  void watch();

  const NetnsCluster& cluster_;
  TempDir dir_;
  mutable std::mutex mutex_;
  std::condition_variable exited_;
  std::vector<std::unique_ptr<Entry>> entries_;  // guarded by mutex_ (the watcher reads them)
  int wake_fd_ = -1;                             // eventfd: a new agent, or stop
  bool stopping_ = false;
  std::thread watcher_;
};

}  // namespace ddp::test
