#include "worker_runtime/comm_queue.hpp"

#include <exception>

namespace ddp::worker_runtime {

struct CommQueue::Task {
  std::function<void()> job;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
};

namespace {

class QueuedWork final : public Work {
 public:
  explicit QueuedWork(std::shared_ptr<CommQueue::Task> task) : task_(std::move(task)) {}

  void wait() override {
    std::unique_lock lock(task_->mu);
    // Bounded: every job is a collective carrying its own deadline.
    task_->cv.wait(lock, [&] { return task_->done; });
    if (task_->error) {
      std::rethrow_exception(task_->error);
    }
  }

  bool is_completed() override {
    std::lock_guard lock(task_->mu);
    return task_->done;
  }

 private:
  std::shared_ptr<CommQueue::Task> task_;
};

}  // namespace

CommQueue::CommQueue() : thread_([this] { run(); }) {}

CommQueue::~CommQueue() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::unique_ptr<Work> CommQueue::submit(std::function<void()> job) {
  auto task = std::make_shared<Task>();
  task->job = std::move(job);
  {
    std::lock_guard lock(mu_);
    tasks_.push_back(task);
  }
  cv_.notify_one();
  return std::make_unique<QueuedWork>(std::move(task));
}

void CommQueue::run_blocking(const std::function<void()>& job) {
  {
    std::unique_lock lock(mu_);
    if (!tasks_.empty() || busy_) {
      lock.unlock();
      submit(job)->wait();
      return;
    }
    busy_ = true;
  }
  auto done = [this] {
    {
      std::lock_guard lock(mu_);
      busy_ = false;
    }
    cv_.notify_all();  // the comm thread may be waiting for the inline job to finish
  };
  try {
    job();
  } catch (...) {
    done();
    throw;
  }
  done();
}

void CommQueue::run() {
  for (;;) {
    std::shared_ptr<Task> task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !busy_ && (stopping_ || !tasks_.empty()); });
      if (tasks_.empty()) {
        return;  // stopping and drained
      }
      task = std::move(tasks_.front());
      tasks_.pop_front();
      busy_ = true;
    }
    std::exception_ptr error;
    try {
      task->job();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(mu_);
      busy_ = false;
    }
    cv_.notify_all();
    {
      std::lock_guard lock(task->mu);
      task->done = true;
      task->error = error;
    }
    task->cv.notify_all();
  }
}

}  // namespace ddp::worker_runtime
