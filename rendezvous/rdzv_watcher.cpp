#include "rendezvous/rdzv_watcher.hpp"

#include <algorithm>

#include "common/error.hpp"
#include "rendezvous/rdzv_keys.hpp"

namespace ddp::rendezvous {

namespace keys = rdzv_keys;
using Clock = std::chrono::steady_clock;

namespace {

// Heartbeat ticks kept per node: the watcher may lag a little behind the writer.
constexpr uint64_t kTicksKept = 3;

// Maps the value of a round's "changed" key to what the agent must do.
std::pair<MembershipChange, std::string> decode_change(const std::string& value, uint64_t round) {
  const std::string where = " (round " + std::to_string(round) + ")";
  if (value.rfind("lost", 0) == 0) {
    return {MembershipChange::kNodeLost,
            "node with group rank" + value.substr(4) + " stopped heartbeating" + where};
  }
  if (value == "rejoin") {
    return {MembershipChange::kNodeWaiting, "a member node is re-joining" + where};
  }
  return {MembershipChange::kNodeWaiting, "a new node is waiting to join" + where};
}

}  // namespace

RoundWatcher::RoundWatcher(RoundWatcherOptions options, std::shared_ptr<Store> events_store,
                           std::shared_ptr<Store> monitor_store, ChangeCallback on_change)
    : options_(options),
      events_store_(std::move(events_store)),
      monitor_store_(std::move(monitor_store)),
      on_change_(std::move(on_change)) {
  events_thread_ = std::thread([this] { events_loop(); });
  if (options_.group_world_size > 1) monitor_thread_ = std::thread([this] { monitor_loop(); });
}

RoundWatcher::~RoundWatcher() {
  stop();
}

void RoundWatcher::stop() {
  stop_ = true;
  if (events_thread_.joinable()) events_thread_.join();
  if (monitor_thread_.joinable()) monitor_thread_.join();
}

void RoundWatcher::fire(MembershipChange change, const std::string& reason) {
  // After stop was requested the round is being left on purpose (this node re-joining sets
  // "changed" itself): nothing to report.
  if (stop_ || fired_.exchange(true)) return;
  on_change_(change, reason);
}

void RoundWatcher::events_loop() {
  Store& store = *events_store_;
  const uint64_t round = options_.round;
  const int me = options_.group_rank;
  const std::string changed = keys::changed(round);
  try {
    for (uint64_t tick = 0; !stop_; ++tick) {
      store.multi_set({keys::heartbeat(round, me, tick), keys::heartbeat_latest(round, me)},
                      {"", std::to_string(tick)});
      if (tick >= kTicksKept) store.delete_key(keys::heartbeat(round, me, tick - kTicksKept));
      try {
        // Blocks until someone reports a change, or until the next beat is due.
        store.wait({changed}, options_.heartbeat_interval);
      } catch (const StoreTimeout&) {
        continue;
      }
      auto [change, reason] = decode_change(store.get(changed), round);
      fire(change, reason);
      return;  // the round is over for everybody; the agent re-joins
    }
  } catch (const std::exception& e) {
    if (!stop_) {
      fire(MembershipChange::kNodeLost, std::string("lost the rendezvous store: ") + e.what() +
                                            " (round " + std::to_string(round) + ")");
    }
  }
}

void RoundWatcher::monitor_loop() {
  Store& store = *monitor_store_;
  const uint64_t round = options_.round;
  const int watched = (options_.group_rank + 1) % options_.group_world_size;
  uint64_t next_tick = 0;
  auto last_beat = Clock::now();
  try {
    while (!stop_) {
      try {
        store.wait({keys::heartbeat(round, watched, next_tick)}, options_.heartbeat_interval);
        ++next_tick;
        last_beat = Clock::now();
        continue;
      } catch (const StoreTimeout&) {
      }
      if (stop_) return;
      // Behind the writer (its old ticks are deleted)? Catch up from its latest tick.
      const std::string latest_key = keys::heartbeat_latest(round, watched);
      if (store.check({latest_key})) {
        const uint64_t latest = std::stoull(store.get(latest_key));
        if (latest >= next_tick) {
          next_tick = latest + 1;
          last_beat = Clock::now();
          continue;
        }
      }
      if (Clock::now() - last_beat < options_.lease_timeout) continue;
      // Only the first change of a round counts; later ones are moot.
      const std::string value = "lost " + std::to_string(watched);
      store.compare_set(keys::changed(round), "", value);
      return;  // the events thread wakes on "changed" and reports it
    }
  } catch (const std::exception& e) {
    if (!stop_) {
      fire(MembershipChange::kNodeLost, std::string("lost the rendezvous store: ") + e.what() +
                                            " (round " + std::to_string(round) + ")");
    }
  }
}

}  // namespace ddp::rendezvous
