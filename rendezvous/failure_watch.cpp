#include "rendezvous/failure_watch.hpp"

#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/error.hpp"
#include "common/log.hpp"

namespace ddp::rendezvous {

struct FailureWatch::Shared {
  std::shared_ptr<Store> wait_store;
  std::shared_ptr<Store> publish_store;
  uint64_t attempt = 0;
  int group_rank = -1;
  Duration slice{};
  std::mutex mu;  // held while calling back, so stop() returning means none runs
  std::condition_variable cv;
  bool stopped = false;
  bool reported = false;
  int publishing = 0;  // publish threads still running
  FailureWatchCallbacks callbacks;

  [[nodiscard]] bool stopping() {
    std::lock_guard<std::mutex> lock(mu);
    return stopped || reported;
  }
  template <typename Fn>
  void report(Fn&& fn) {
    std::lock_guard<std::mutex> lock(mu);
    if (stopped || reported) return;
    reported = true;
    fn(callbacks);
  }
  void report_record(const FailureRecord& record) {
    report([&](FailureWatchCallbacks& cb) {
      if (cb.on_failure) cb.on_failure(record);
    });
  }
};

namespace {

void watch_loop(const std::shared_ptr<FailureWatch::Shared>& shared) {
  auto& s = *shared;
  const std::string key = failure_key(s.attempt);
  Store* store = s.wait_store.get();
  // A slice that came back this much late: the store stalled it and then answered.
  auto check_stall = [&](std::chrono::steady_clock::time_point began) {
    const auto late =
        std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now() - began - s.slice);
    if (late < kStoreStallReport) return;
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.stopped && !s.reported && s.callbacks.on_store_stall) s.callbacks.on_store_stall(late);
  };
  try {
    while (!s.stopping()) {
      const auto began = std::chrono::steady_clock::now();
      try {
        store->wait({key}, s.slice);
      } catch (const StoreTimeout&) {
        check_stall(began);
        continue;
      }
      check_stall(began);
      // One request (a store host announcing that it leaves exits soon after): no GET,
      // which would WAIT again first.
      const auto text = read_if_present(*store, key);
      if (!text) continue;  // deleted again: not a record anyone published
      const FailureRecord record = decode_failure(*text);
      s.report_record(record);
      if (s.group_rank >= 0) {
        // The store host waits for this before it goes (store_leaving_ack_key): after it
        // announced that it leaves, or after a failure, so the store's going away a moment
        // later is not taken for its death by a node that has not read the record yet.
        store->set(store_leaving_ack_key(s.attempt, s.group_rank), "1");
      }
      return;
    }
  } catch (const ProtocolError& e) {
    // A record nobody can read still says the attempt failed.
    FailureRecord unreadable;
    unreadable.kind = "worker";
    unreadable.attempt = s.attempt;
    unreadable.exit_code = 1;
    unreadable.message = std::string("unreadable failure record: ") + e.what();
    s.report_record(unreadable);
  } catch (const std::exception& e) {
    s.report([&](FailureWatchCallbacks& cb) {
      if (cb.on_store_lost) cb.on_store_lost(e.what());
    });
  }
}

}  // namespace

FailureWatch::FailureWatch(std::shared_ptr<Store> wait_store, std::shared_ptr<Store> publish_store,
                           uint64_t attempt, int group_rank, FailureWatchCallbacks callbacks,
                           Duration slice)
    : shared_(std::make_shared<Shared>()) {
  shared_->wait_store = std::move(wait_store);
  shared_->publish_store = std::move(publish_store);
  shared_->attempt = attempt;
  shared_->group_rank = group_rank;
  shared_->slice = slice;
  shared_->callbacks = std::move(callbacks);
  std::thread([shared = shared_] { watch_loop(shared); }).detach();
}

FailureWatch::~FailureWatch() {
  stop();
}

void FailureWatch::stop() {
  std::lock_guard<std::mutex> lock(shared_->mu);
  shared_->stopped = true;
}

void FailureWatch::publish(FailureRecord record) {
  record.attempt = shared_->attempt;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    ++shared_->publishing;
  }
  std::thread([shared = shared_, record = std::move(record)] {
    try {
      // The record that holds comes back at once: no need to wait for the watch to see it.
      shared->report_record(publish_failure(*shared->publish_store, record));
    } catch (const std::exception& e) {
      // The watch reports a store that is gone; this only says the record did not go out.
      DDP_LOG_WARN(std::string("could not publish the failure for the other nodes: ") + e.what());
    }
    std::lock_guard<std::mutex> lock(shared->mu);
    --shared->publishing;
    shared->cv.notify_all();
  }).detach();
}

bool FailureWatch::flush(Duration timeout) {
  std::unique_lock<std::mutex> lock(shared_->mu);
  return shared_->cv.wait_for(lock, timeout, [&] { return shared_->publishing == 0; });
}

}  // namespace ddp::rendezvous
