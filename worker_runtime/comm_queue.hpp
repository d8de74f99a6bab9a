#pragma once
// A communication thread: runs submitted jobs one at a time, in submission order, and hands
// back a Work per job. Gloo's collectives block, so async collectives (gradient buckets) run
// here while the caller goes on computing; blocking ones are submitted and waited for, which
// keeps every collective in one global order on every rank.
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "worker_runtime/process_group.hpp"

namespace ddp::worker_runtime {

class CommQueue {
 public:
  CommQueue();
  // Runs the jobs still queued, then joins the thread.
  ~CommQueue();
  CommQueue(const CommQueue&) = delete;
  CommQueue& operator=(const CommQueue&) = delete;

  // Queues job; the returned Work's wait() rethrows whatever job threw.
  std::unique_ptr<Work> submit(std::function<void()> job);

  struct Task;  // one queued job and its completion state (public for the Work handle)

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Task>> tasks_;
  bool stopping_ = false;
  std::thread thread_;  // last: started after every other member exists
};

}  // namespace ddp::worker_runtime
