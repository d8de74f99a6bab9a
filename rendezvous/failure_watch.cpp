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
  Duration tolerance{};
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

// Between two tries of a store that does not answer yet.
constexpr Duration kSilenceRetry{250};

// Reads the attempt's record once the WAIT saw it; false when it was deleted again (not a
// record anyone published).
bool deliver_record(FailureWatch::Shared& s, Store& store, const std::string& key) {
  // One request (a store host announcing that it leaves exits soon after): no GET, which
  // would WAIT again first.
  const auto text = read_if_present(store, key);
  if (!text) return false;
  s.report_record(decode_failure(*text));
  if (s.group_rank >= 0) {
    // The store host waits for this before it goes (store_leaving_ack_key): after it
    // announced that it leaves, or after a failure, so the store's going away a moment later
    // is not taken for its death by a node that has not read the record yet.
    store.set(store_leaving_ack_key(s.attempt, s.group_rank), "1");
  }
  return true;
}

void watch_loop(const std::shared_ptr<FailureWatch::Shared>& shared) {
  using Clock = std::chrono::steady_clock;
  auto& s = *shared;
  const std::string key = failure_key(s.attempt);
  Store* store = s.wait_store.get();
  // A slice that came back this much late: the store stalled it and then answered.
  auto check_stall = [&](Clock::time_point began) {
    const auto late = std::chrono::duration_cast<Duration>(Clock::now() - began - s.slice);
    if (late < kStoreStallReport) return;
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.stopped && !s.reported && s.callbacks.on_store_stall) s.callbacks.on_store_stall(late);
  };
  auto last_heard = Clock::now();  // the store's last answer
  try {
    while (!s.stopping()) {
      const auto began = Clock::now();
      try {
        store->wait({key}, s.slice);
        check_stall(began);
        last_heard = Clock::now();
        if (deliver_record(s, *store, key)) return;
      } catch (const StoreTimeout&) {
        check_stall(began);
        last_heard = Clock::now();
      } catch (const StoreError& e) {
        // Silence shorter than the tolerance is not a loss (a connection made during a cut
        // fails at once, "Network is unreachable"): the next call connects again.
        if (e.loss() != PeerLoss::kSilence || Clock::now() - last_heard >= s.tolerance) throw;
        std::this_thread::sleep_for(kSilenceRetry);
      }
    }
  } catch (const ProtocolError& e) {
    // A record nobody can read still says the attempt failed.
    FailureRecord unreadable;
    unreadable.kind = "worker";
    unreadable.attempt = s.attempt;
    unreadable.exit_code = 1;
    unreadable.message = std::string("unreadable failure record: ") + e.what();
    s.report_record(unreadable);
  } catch (const StoreError& e) {
    s.report([&](FailureWatchCallbacks& cb) {
      if (cb.on_store_lost) cb.on_store_lost(e.what(), e.loss());
    });
  } catch (const std::exception& e) {
    s.report([&](FailureWatchCallbacks& cb) {
      if (cb.on_store_lost) cb.on_store_lost(e.what(), PeerLoss::kUnknown);
    });
  }
}

}  // namespace

FailureWatch::FailureWatch(std::shared_ptr<Store> wait_store, std::shared_ptr<Store> publish_store,
                           uint64_t attempt, int group_rank, FailureWatchCallbacks callbacks,
                           Duration slice, Duration tolerance)
    : shared_(std::make_shared<Shared>()) {
  shared_->wait_store = std::move(wait_store);
  shared_->publish_store = std::move(publish_store);
  shared_->attempt = attempt;
  shared_->group_rank = group_rank;
  shared_->slice = slice;
  shared_->tolerance = tolerance;
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

std::optional<FailureRecord> FailureWatch::read_record() const {
  if (!shared_->publish_store) return std::nullopt;
  try {
    const auto text = read_if_present(*shared_->publish_store, failure_key(shared_->attempt));
    if (!text) return std::nullopt;
    return decode_failure(*text);
  } catch (const Error& e) {
    DDP_LOG_DEBUG(std::string("could not read the job's failure record: ") + e.what());
    return std::nullopt;
  }
}

bool FailureWatch::flush(Duration timeout) {
  std::unique_lock<std::mutex> lock(shared_->mu);
  return shared_->cv.wait_for(lock, timeout, [&] { return shared_->publishing == 0; });
}

}  // namespace ddp::rendezvous
