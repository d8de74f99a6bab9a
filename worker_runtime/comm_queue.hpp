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
  // Runs job to completion: on the calling thread when nothing is queued or running (saves
  // two thread hand-offs per blocking collective), else queued behind the others. Rethrows.
  void run_blocking(const std::function<void()>& job);

  struct Task;  // one queued job and its completion state (public for the Work handle)

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Task>> tasks_;
  bool stopping_ = false;
  bool busy_ = false;   // a job is running (on the comm thread or inline)
  std::thread thread_;  // last: started after every other member exists
};

}  // namespace ddp::worker_runtime
