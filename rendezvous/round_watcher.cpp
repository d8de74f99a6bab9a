#include "rendezvous/round_watcher.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <thread>

#include "common/deadline.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "rendezvous/exit_barrier.hpp"
#include "rendezvous/membership_claims.hpp"
#include "rendezvous/round_keys.hpp"
#include "rendezvous/store_succession.hpp"

namespace ddp::rendezvous {

namespace keys = rdzv_keys;
using Clock = std::chrono::steady_clock;

namespace {

// Heartbeat ticks kept per node: the watcher may lag a little behind the writer.
constexpr uint64_t kTicksKept = 3;

// The latest heartbeat tick group rank g wrote, -1 when none.
int64_t latest_tick(Store& store, uint64_t round, int g) {
  const std::string text = read_if_present(store, keys::heartbeat_latest(round, g)).value_or("");
  int64_t tick = -1;
  std::from_chars(text.data(), text.data() + text.size(), tick);
  return tick;
}

// How much longer than a heartbeat interval one monitor pass may take before it counts as a
// stall (this process paused, or the store silent) rather than ordinary scheduling.
constexpr std::chrono::milliseconds kStallSlack{1000};

std::string seconds_text(Clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", std::chrono::duration<double>(d).count());
  return text;
}

std::string in_round(uint64_t round) {
  return " (round " + std::to_string(round) + ")";
}

}  // namespace

Duration lease_for(Duration tolerance, Duration heartbeat_interval) {
  return tolerance + heartbeat_interval + std::chrono::milliseconds(2500);
}

RoundWatcher::RoundWatcher(RoundWatcherOptions options, std::shared_ptr<Store> events_store,
                           std::shared_ptr<Store> monitor_store, ChangeCallback on_change)
    : options_(options),
      events_store_(std::move(events_store)),
      monitor_store_(std::move(monitor_store)),
      on_change_(std::move(on_change)) {
  // Before the thread starts: it reads next_beat_ (a lease store must never see a beat).
  if (!options_.heartbeats) next_beat_ = Clock::time_point::max();
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

void RoundWatcher::fire(MembershipChange change, const std::string& reason, PeerLoss loss) {
  // After stop was requested the round is being left on purpose (this node re-joining posts
  // a claim itself): nothing to report.
  if (stop_ || fired_.exchange(true)) return;
  on_change_(change, ChangeReason{reason, loss});
}

bool RoundWatcher::quorum_lost(Store& store, Clock::duration stall) {
  if (!options_.quorum) return false;
  const uint64_t round = options_.round;
  const auto size = static_cast<size_t>(options_.group_world_size);
  const auto now = Clock::now();
  if (quorum_seen_.empty()) {
    quorum_seen_.assign(size, now);
    quorum_ticks_.assign(size, -1);
    quorum_next_ = now;
  }
  // This node's own stall is no evidence against anyone.
  for (auto& seen : quorum_seen_) seen = std::min(now, seen + stall);
  if (now < quorum_next_) return false;
  // Every beat: the host must step down before the ring's lease makes it re-form without the
  // silent ones (which may be the majority, about to carry the store on).
  quorum_next_ = now + options_.heartbeat_interval;
  const ExitBarrier barrier{store, keys::departed(round), options_.group_world_size};
  int silent = 0;
  for (size_t g = 0; g < size; ++g) {
    if (static_cast<int>(g) == options_.group_rank) continue;
    const int64_t tick = latest_tick(store, round, static_cast<int>(g));
    if (tick != quorum_ticks_[g]) {
      quorum_ticks_[g] = tick;
      quorum_seen_[g] = now;
      continue;
    }
    if (now - quorum_seen_[g] >= options_.tolerance &&
        barrier.out_reason(static_cast<int>(g)).empty()) {
      ++silent;
    }
  }
  if (!rendezvous::quorum_lost(silent, options_.group_world_size)) return false;
  fire(MembershipChange::kSteppedDown,
       "this node serves the store of round " + std::to_string(round) + " and heard nothing from " +
           std::to_string(silent) + " of its " + std::to_string(options_.group_world_size) +
           " nodes for the peer tolerance (" + seconds_text(options_.tolerance) +
           "): it steps down, so that the majority can carry the store on",
       PeerLoss::kSilence);
  return true;
}

void RoundWatcher::store_lost(const std::exception& e) {
  if (stop_ || fired_.exchange(true)) return;
  const auto* store_error = dynamic_cast<const StoreError*>(&e);
  on_change_(
      MembershipChange::kStoreLost,
      ChangeReason{std::string("lost the rendezvous store: ") + e.what() + in_round(options_.round),
                   store_error != nullptr ? store_error->loss() : PeerLoss::kUnknown});
}

void RoundWatcher::beat(Store& store) {
  const uint64_t round = options_.round;
  const int me = options_.group_rank;
  store.multi_set({keys::heartbeat(round, me, tick_), keys::heartbeat_latest(round, me)},
                  {"", std::to_string(tick_)});
  if (tick_ >= kTicksKept) store.delete_key(keys::heartbeat(round, me, tick_ - kTicksKept));
  ++tick_;
  next_beat_ = Clock::now() + options_.heartbeat_interval;
}

void RoundWatcher::events_loop() {
  Store& store = *events_store_;
  const uint64_t round = options_.round;
  int slot = 1;
  try {
    while (!stop_ && beating_ && !fired_) {
      if (Clock::now() >= next_beat_) beat(store);
      // Without heartbeats, wake every heartbeat_interval anyway to notice stop_.
      const auto until_beat = options_.heartbeats
                                  ? std::chrono::duration_cast<Duration>(next_beat_ - Clock::now())
                                  : options_.heartbeat_interval;
      if (slot > kMaxChangeSlots) {
        // Every slot was used up by claims found false: beat on, monitor on, listen no more.
        std::this_thread::sleep_for(std::max(until_beat, Duration(1)));
        continue;
      }
      try {
        // Blocks until someone claims a change, or until the next beat is due.
        store.wait({keys::changed(round, slot)}, std::max(until_beat, Duration(1)));
      } catch (const StoreTimeout&) {
        continue;
      }
      const std::string value = store.get(keys::changed(round, slot));
      if (value.rfind(kRefutedPrefix, 0) == 0) {
        ++slot;
        continue;
      }
      const std::string why_false = refutation(store, value);
      if (why_false.empty()) {
        const ChangeClaim claim = parse_change(value);
        if (claim.kind == ChangeClaim::Kind::kLost) {
          // Out of the round: a node whose connection closed is gone for good, and the
          // re-formed round does not wait for it.
          const bool gone = claim.rank != options_.group_rank && connection_gone(store, claim.rank);
          if (gone) {
            const ExitBarrier barrier{store, keys::departed(round), options_.group_world_size};
            barrier.count_out(claim.rank, "disconnected");
          }
          fire(MembershipChange::kNodeLost,
               "node with group rank " + std::to_string(claim.rank) +
                   (gone ? (options_.heartbeats ? " is gone (its store connection closed)"
                                                : " is gone (its lease expired)")
                    : options_.heartbeats
                        ? " stopped heartbeating"
                        : " never bound its presence (it died before the round started)") +
                   in_round(round));
        } else if (claim.kind == ChangeClaim::Kind::kSteppedDown) {
          fire(MembershipChange::kStoreLost,
               "the store's host stepped down (it heard nothing from most of its round)" +
                   in_round(round),
               PeerLoss::kSilence);
        } else if (claim.kind == ChangeClaim::Kind::kRejoin) {
          fire(MembershipChange::kNodeWaiting, "a member node is re-joining" + in_round(round));
        } else {
          fire(MembershipChange::kNodeWaiting, "a new node is waiting to join" + in_round(round));
        }
        return;  // the round is over for everybody; the agent re-joins
      }
      refute_change(store, round, slot, value);
      std::string line = "rendezvous round " + std::to_string(round);
      line += ": ignoring the membership claim '" + value;
      line += "': " + why_false;
      DDP_LOG_WARN(line);
      ++slot;
    }
  } catch (const std::exception& e) {
    store_lost(e);
  }
}

bool RoundWatcher::connection_gone(Store& store, int g) const {
  const uint64_t round = options_.round;
  return store.check({keys::bound(round, g)}) && !store.check({keys::alive(round, g)});
}

std::string RoundWatcher::refutation(Store& store, const std::string& value) {
  const uint64_t round = options_.round;
  const ChangeClaim claim = parse_change(value);
  switch (claim.kind) {
    case ChangeClaim::Kind::kWaiting: {
      if (store.check({keys::finished(round)})) {
        return "a member already finished, so the round admits nobody new";
      }
      // A waiting node arrived after the round closed: more arrivals than members.
      const std::string closed = read_if_present(store, keys::closed(round)).value_or("");
      int64_t members = 0;
      std::from_chars(closed.data(), closed.data() + closed.size(), members);
      const int64_t arrivals = store.tickets(keys::arrived(round));
      if (arrivals <= members) {
        return "no node arrived after the round closed (" + std::to_string(arrivals) +
               " arrivals, " + std::to_string(members) + " members)";
      }
      return "";
    }
    case ChangeClaim::Kind::kSteppedDown:
      if (!store.check({keys::kSteppedDown})) return "the store has not stepped down";
      return "";
    case ChangeClaim::Kind::kRejoin:
      if (!store.check({keys::opened(round + 1)})) {
        return "no member opened round " + std::to_string(round + 1);
      }
      return "";
    case ChangeClaim::Kind::kLost: {
      if (claim.rank == options_.group_rank) {
        // The store dropped our own presence (its connection broke): to the others we are
        // gone, and they re-form without us; re-joining brings this node back.
        if (connection_gone(store, claim.rank)) return "";
        // Reading this, we are alive. It holds only when the others already moved on (we
        // were stopped long enough to be found silent): the one who found us opens the next
        // round; if it has not yet, its "rejoin" claim will follow in the next slot.
        if (store.check({keys::opened(round + 1)})) return "";
        return "this node is group rank " + std::to_string(claim.rank) + " and is running";
      }
      if (claim.rank >= options_.group_world_size) {
        return "the round has no group rank " + std::to_string(claim.rank);
      }
      const ExitBarrier barrier{store, keys::departed(round), options_.group_world_size};
      if (barrier.out_reason(claim.rank) == "finished") {
        return "group rank " + std::to_string(claim.rank) + " finished its work";
      }
      // Its presence is gone: the store saw its connection close (the agent died).
      if (connection_gone(store, claim.rank)) return "";
      if (!options_.heartbeats) {
        // The claimer waited twice the lease for it to bind one: it died in between.
        if (!store.check({keys::bound(round, claim.rank)})) return "";
        return "group rank " + std::to_string(claim.rank) + " still holds its presence";
      }
      if (still_beating(store, claim.rank)) {
        return "group rank " + std::to_string(claim.rank) + " is still heartbeating";
      }
      return "";
    }
    case ChangeClaim::Kind::kInvalid:
      break;
  }
  return "expected 'waiting', 'rejoin' or 'lost <group rank>'";
}

bool RoundWatcher::still_beating(Store& store, int g) {
  if (!options_.heartbeats) return false;
  const uint64_t round = options_.round;
  const std::string next =
      keys::heartbeat(round, g, static_cast<uint64_t>(latest_tick(store, round, g) + 1));
  const auto deadline = Deadline::after(options_.heartbeat_interval * 3 / 2);
  while (!deadline.expired() && !stop_) {
    if (Clock::now() >= next_beat_) beat(store);  // checking must not make us look lost
    const auto until = std::min(deadline, Deadline::at(next_beat_));
    try {
      store.wait({next}, std::max(until.remaining(), Duration(1)));
      return true;
    } catch (const StoreTimeout&) {
    }
  }
  return false;
}

void RoundWatcher::presence_monitor_loop() {
  Store& store = *monitor_store_;
  const uint64_t round = options_.round;
  const int me = options_.group_rank;
  const int size = options_.group_world_size;
  const ExitBarrier barrier{store, keys::departed(round), size};
  // Two reads per period on the next rank of the ring: O(1) store traffic per node.
  const Duration period = std::max(options_.heartbeat_interval, options_.lease_timeout / 2);
  // A member that has not bound its presence by then never will: it died between its
  // arrival and the end of the round, where no lease of it covers this round yet.
  const auto unbound_limit = Clock::now() + options_.lease_timeout * 2;
  int watched = me;
  auto advance = [&] {
    while (true) {
      watched = (watched + 1) % size;
      if (watched == me) return false;
      if (barrier.out_reason(watched).empty()) return true;
    }
  };
  try {
    if (!advance()) return;
    while (!stop_) {
      const auto wake = Clock::now() + period;
      while (!stop_ && Clock::now() < wake) {
        std::this_thread::sleep_for(std::min<Duration>(std::chrono::milliseconds(50), period));
      }
      if (stop_) return;
      if (!barrier.out_reason(watched).empty()) {
        if (!advance()) return;
        continue;
      }
      const bool bound = store.check({keys::bound(round, watched)});
      const bool gone =
          bound ? !store.check({keys::alive(round, watched)}) : Clock::now() >= unbound_limit;
      // Left on its own meanwhile (its presence goes after it counts itself out)?
      if (!gone || !barrier.out_reason(watched).empty()) continue;
      fire(MembershipChange::kNodeLost,
           "node with group rank " + std::to_string(watched) +
               (bound ? " is gone (its lease expired)"
                      : " never bound its presence (it died before the round started)") +
               in_round(round));
      post_change(store, round, "lost " + std::to_string(watched));
      barrier.count_out(watched, bound ? "disconnected" : "lost");
      return;
    }
  } catch (const std::exception& e) {
    store_lost(e);
  }
}

void RoundWatcher::monitor_loop() {
  if (!options_.heartbeats) {
    presence_monitor_loop();
    return;
  }
  Store& store = *monitor_store_;
  const uint64_t round = options_.round;
  const int me = options_.group_rank;
  const int size = options_.group_world_size;
  const ExitBarrier barrier{store, keys::departed(round), size};
  int watched = me;
  uint64_t next_tick = 0;
  auto last_beat = Clock::now();
  // Moves to the next rank of the ring still in the round; false when none is left.
  auto advance = [&] {
    while (true) {
      watched = (watched + 1) % size;
      if (watched == me) return false;
      if (barrier.out_reason(watched).empty()) break;
    }
    next_tick = static_cast<uint64_t>(latest_tick(store, round, watched) + 1);
    last_beat = Clock::now();
    return true;
  };
  // A beat that arrives after this much silence is worth a line: the peer was silent (a
  // network blip, a paused host) and came back within the lease.
  const auto noteworthy = std::max<Duration>(options_.heartbeat_interval * 3, kStallSlack);
  try {
    if (!advance()) return;
    while (!stop_) {
      const auto began = Clock::now();
      bool beat_seen = false;
      try {
        store.wait({keys::heartbeat(round, watched, next_tick)}, options_.heartbeat_interval);
        ++next_tick;
        beat_seen = true;
      } catch (const StoreTimeout&) {
      }
      if (stop_) return;
      if (!beat_seen) {
        // Behind the writer (its old ticks are deleted)? Catch up from its latest tick.
        const int64_t latest = latest_tick(store, round, watched);
        if (latest >= 0 && static_cast<uint64_t>(latest) >= next_tick) {
          next_tick = static_cast<uint64_t>(latest) + 1;
          beat_seen = true;
        }
      }
      const auto now = Clock::now();
      // This loop takes about one heartbeat_interval. Longer means this process was paused
      // (SIGSTOP, a frozen VM) or the store did not answer (a blip on our own link, a paused
      // store host): silence we could not observe is no evidence against the watched node.
      const auto stalled = now - began - options_.heartbeat_interval;
      if (quorum_lost(store, stalled > kStallSlack ? stalled : Clock::duration(0))) return;
      if (stalled > kStallSlack) {
        last_beat = std::min(now, last_beat + stalled);
        DDP_LOG_WARN("rendezvous round " + std::to_string(round) + ": this node or the store was " +
                     "unresponsive for " + seconds_text(stalled) +
                     " (paused, or a network blip); not held against group rank " +
                     std::to_string(watched));
      }
      if (beat_seen) {
        if (now - last_beat >= noteworthy) {
          DDP_LOG_WARN("node with group rank " + std::to_string(watched) + " was silent for " +
                       seconds_text(now - last_beat) + " and came back" + in_round(round));
        }
        last_beat = now;
        continue;
      }
      if (now - last_beat < options_.lease_timeout) continue;
      // Silent: left on its own (finished, failed, re-joined), or lost.
      if (!barrier.out_reason(watched).empty()) {
        if (!advance()) return;
        continue;
      }
      // Report first: counting the last member out ends a store host's exit barrier, which
      // then stops this watcher.
      fire(MembershipChange::kNodeLost, "node with group rank " + std::to_string(watched) +
                                            " stopped heartbeating" + in_round(round));
      post_change(store, round, "lost " + std::to_string(watched));
      barrier.count_out(watched, "lost");
      return;
    }
  } catch (const std::exception& e) {
    store_lost(e);
  }
}

}  // namespace ddp::rendezvous
