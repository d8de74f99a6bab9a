#include "rendezvous/failure_watch.hpp"

#include <atomic>
#include <mutex>
#include <thread>

#include "common/error.hpp"
#include "common/log.hpp"

namespace ddp::rendezvous {

struct FailureWatch::Shared {
  std::shared_ptr<Store> wait_store;
  std::shared_ptr<Store> publish_store;
  uint64_t attempt = 0;
  Duration slice{};
  std::mutex mu;  // held while calling back, so stop() returning means none runs
  bool stopped = false;
  bool reported = false;
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
};

namespace {

void watch_loop(const std::shared_ptr<FailureWatch::Shared>& shared) {
  auto& s = *shared;
  const std::string key = failure_key(s.attempt);
  Store* store = s.wait_store.get();
  try {
    while (!s.stopping()) {
      try {
        store->wait({key}, s.slice);
      } catch (const StoreTimeout&) {
        continue;
      }
      // One request (a store host announcing that it leaves exits right after): no GET,
      // which would WAIT again first.
      const auto text = read_if_present(*store, key);
      if (!text) continue;  // deleted again: not a record anyone published
      const FailureRecord record = decode_failure(*text);
      s.report([&](FailureWatchCallbacks& cb) {
        if (cb.on_failure) cb.on_failure(record);
      });
      return;
    }
  } catch (const ProtocolError& e) {
    // A record nobody can read still says the attempt failed.
    FailureRecord unreadable;
    unreadable.kind = "worker";
    unreadable.attempt = s.attempt;
    unreadable.exit_code = 1;
    unreadable.message = std::string("unreadable failure record: ") + e.what();
    s.report([&](FailureWatchCallbacks& cb) {
      if (cb.on_failure) cb.on_failure(unreadable);
    });
  } catch (const std::exception& e) {
    s.report([&](FailureWatchCallbacks& cb) {
      if (cb.on_store_lost) cb.on_store_lost(e.what());
    });
  }
}

}  // namespace

FailureWatch::FailureWatch(std::shared_ptr<Store> wait_store, std::shared_ptr<Store> publish_store,
                           uint64_t attempt, FailureWatchCallbacks callbacks, Duration slice)
    : shared_(std::make_shared<Shared>()) {
  shared_->wait_store = std::move(wait_store);
  shared_->publish_store = std::move(publish_store);
  shared_->attempt = attempt;
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
  std::thread([shared = shared_, record = std::move(record)] {
    try {
      publish_failure(*shared->publish_store, record);
    } catch (const std::exception& e) {
      // The watch reports a store that is gone; this only says the record did not go out.
      DDP_LOG_WARN(std::string("could not publish the failure for the other nodes: ") + e.what());
    }
  }).detach();
}

}  // namespace ddp::rendezvous
