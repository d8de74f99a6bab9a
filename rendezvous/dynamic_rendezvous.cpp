#include "rendezvous/dynamic_rendezvous.hpp"

#include <algorithm>
#include <charconv>
#include <thread>

#include "common/error.hpp"
#include "common/host_address.hpp"
#include "common/log.hpp"
#include "rendezvous/assignment.hpp"
#include "rendezvous/exit_barrier.hpp"
#include "rendezvous/failure_record.hpp"
#include "rendezvous/membership_claims.hpp"
#include "rendezvous/round_keys.hpp"
#include "rendezvous/round_watcher.hpp"
#include "rendezvous/store/prefix_store.hpp"
#include "rendezvous/store_succession.hpp"

namespace ddp::rendezvous {

namespace keys = rdzv_keys;

namespace {

// Keys in one MULTI_SET of the closing node at most (etcd's --max-txn-ops default).
constexpr size_t kMaxKeysPerWrite = 128;
// Between two tries to reach a store that does not answer (each try waits for a connection
// up to its own connect timeout first).
constexpr Duration kSilenceRetry{500};
// A connection opened while the store is known to be up (watchers, shutdown), and a try of a
// successor's standby (one that does not answer is tried again later).
constexpr Duration kSideConnectTimeout{3000};
constexpr Duration kSuccessorConnectTimeout{1000};
// How long a survivor waits on one successor for the store to open before it looks again at
// the others (one may have opened meanwhile, or the lost store answered again).
constexpr Duration kSuccessorWait{2000};
// How soon a spare standing by notices that its agent leaves (shutdown() from another
// thread): its wait for a round is cut in slices this long.
constexpr Duration kSpareLeaveCheck{1000};
// How often a spare let into a round looks whether the previous round's members are in.
constexpr Duration kSpareYieldPoll{20};
// How often a re-formed round's last call checks again whether every member it still
// expects is in (DynamicRendezvousOptions::wait_for_lost off).
constexpr Duration kLostRecheck{250};

std::string in_round_text(uint64_t round) {
  return " (round " + std::to_string(round) + ")";
}

std::string seconds_text(Duration d) {
  const auto ms = d.count();
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  return std::to_string(ms) + " ms";
}

void validate(const DynamicRendezvousOptions& o) {
  if (o.min_nodes < 1 || o.max_nodes < o.min_nodes) {
    throw ConfigError("--nnodes " + std::to_string(o.min_nodes) + ":" +
                      std::to_string(o.max_nodes) + ": expected MIN:MAX with 1 <= MIN <= MAX");
  }
  if (o.local_world_size < 1) {
    throw ConfigError("nproc_per_node " + std::to_string(o.local_world_size) +
                      ": expected at least 1");
  }
  if (o.run_id.empty()) throw ConfigError("rdzv_id is empty: expected a job identifier");
  auto positive = [](Duration d, const char* name) {
    if (d.count() <= 0) {
      throw ConfigError(std::string(name) + "=" + std::to_string(d.count()) +
                        " ms: expected a positive duration");
    }
  };
  positive(o.join_timeout, "join_timeout");
  positive(o.close_timeout, "close_timeout");
  positive(o.heartbeat_interval, "heartbeat_interval");
  positive(o.progress_interval, "progress_interval");
  if (o.last_call_timeout.count() < 0) {
    throw ConfigError("last_call_timeout=" + std::to_string(o.last_call_timeout.count()) +
                      " ms: expected zero or a positive duration");
  }
  if (o.lease_timeout < o.heartbeat_interval * 2) {
    throw ConfigError("lease_timeout=" + seconds_text(o.lease_timeout) +
                      ": expected at least twice heartbeat_interval (" +
                      seconds_text(o.heartbeat_interval) + ")");
  }
}

}  // namespace

DynamicRendezvous::DynamicRendezvous(DynamicRendezvousOptions options, std::shared_ptr<Store> store,
                                     StoreConnector connect)
    : options_(std::move(options)), connect_(std::move(connect)) {
  validate(options_);
  store_ = std::make_shared<PrefixStore>("/ddp_rdzv/" + options_.run_id, std::move(store));
  store_endpoint_ = Endpoint{options_.master_addr, options_.master_port};
  node_id_ = make_node_id(options_.node_addr);
}

Endpoint DynamicRendezvous::store_endpoint() const {
  std::lock_guard<std::mutex> lock(endpoint_mu_);
  return store_endpoint_;
}

DynamicRendezvous::~DynamicRendezvous() {
  if (options_.worker_store) options_.worker_store->stop_witness();
  stop_watcher();
}

ChangeReason DynamicRendezvous::last_change() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_reason_;
}

RendezvousInfo DynamicRendezvous::next_rendezvous() {
  const auto deadline = Deadline::after(options_.join_timeout);
  const auto started = Clock::now();
  auto next_line = started;
  while (true) {
    try {
      return join_round(deadline);
    } catch (const StoreError& e) {
      // The store's host is lost (a death), or silent: where the store can move, it moves to
      // the successor's standby (or back, once it answers again); a timeout of our own, or a
      // failure that says nothing of the host, is final.
      if (options_.dial && succession_ && e.loss() != PeerLoss::kUnknown && !deadline.expired()) {
        fail_over(fenced_seen_ ? PeerLoss::kSilence : e.loss(), deadline);
        continue;
      }
      // A spare that loses the store to a death: the job ended (its host closes the store as
      // it leaves) or its host was lost; either way the job goes on, or not, without it.
      if (standing_by_ && e.loss() == PeerLoss::kDeath) {
        throw NotNeeded("rendezvous '" + options_.run_id + "': the store at " + store_->describe() +
                        " closed while this node stood by as a spare (" + e.what() +
                        "): the job finished without needing this node");
      }
      // Without a successor, silence (this node was cut off, or the store's host was) is only
      // silence: keep trying until join_timeout, as for the first join.
      if (e.loss() != PeerLoss::kSilence || deadline.expired()) throw;
      const auto now = Clock::now();
      if (now >= next_line) {
        DDP_LOG_WARN("rendezvous '" + options_.run_id + "': the store at " + store_->describe() +
                     " does not answer (" +
                     seconds_text(std::chrono::duration_cast<Duration>(now - started)) +
                     " so far; trying again until join_timeout " +
                     seconds_text(options_.join_timeout) + "): " + e.what());
        next_line = now + options_.progress_interval;
      }
      std::this_thread::sleep_for(std::min<Duration>(deadline.remaining(), kSilenceRetry));
    }
  }
}

RendezvousInfo DynamicRendezvous::join_round(const Deadline& join_deadline) {
  // A spare admitted after standing by gets a whole join_timeout for the round it enters.
  Deadline deadline = join_deadline;
  stop_watcher();
  throw_if_stepped_down();
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.reset();
  }
  {
    // Until this round completes there is no group to wait for at the exit barrier.
    std::lock_guard<std::mutex> lock(conn_mu_);
    last_info_.reset();
  }
  bool admitted = false;  // a member re-joining opens its next round itself
  uint64_t round = 0;
  if (last_round_) {
    round = *last_round_ + 1;
    open_round(round);
    admitted = true;
  } else {
    round = start_round();
  }
  while (true) {
    // No closed check here: shutdown() closes the current and next round, so arriving in
    // one of them says so; later rounds are reached only through the late path below.
    if (!admitted && round > 0) {
      wait_admitted(round, deadline, standing_by_);
      if (standing_by_) {
        yield_to_members(round);
        deadline = Deadline::after(options_.join_timeout);
      }
    }
    const int64_t idx = store_->take_ticket(keys::arrived(round));
    store_->multi_set(
        {keys::node(round, idx), keys::standby(round, idx)},
        {format_record(NodeRecord{options_.local_world_size, prev_rank_, node_id_}),
         options_.standby.host.empty() ? std::string() : format_endpoint(options_.standby)});
    if (idx == options_.min_nodes) store_->set(keys::min_reached(round), "1");
    if (idx == options_.max_nodes && try_claim(round, idx, idx)) {
      publish_round(round, idx, idx);
    } else if (round > 0 && idx <= options_.max_nodes) {
      // A member found gone for good (its connection dropped) that comes back anyway counts
      // as a newcomer: it must not stand in for a member still on its way.
      const bool member_back =
          last_round_ && *last_round_ + 1 == round &&
          ExitBarrier{*store_, keys::departed(round - 1), last_info_size_}.out_reason(prev_rank_) ==
              "rejoined";
      close_if_complete(round, idx, member_back);
    }

    std::optional<std::string> assignment;
    if (idx <= options_.max_nodes) {
      wait_closed(round, idx, deadline);
      // Members find their assignment at once: it was written together with "closed".
      assignment = read_if_present(*store_, keys::assign(round, idx));
    }
    if (!assignment) {
      const Closing closing = read_closing(round, idx);
      if (closing.count < 0) throw_closed();
      // Late: ask the running group to re-form when it has room and is not finishing, then
      // wait for the next round.
      const bool room = idx <= options_.max_nodes && closing.count < options_.max_nodes;
      const bool finishing = room && store_->check({keys::finished(round)});
      if (room && !finishing) {
        // A newcomer's workers start first: the running ones re-form once they are ready.
        if (!last_round_) {
          waited_outside_ = true;
          await_workers(round, deadline);
        }
        post_change(*store_, round, "waiting");
      }
      // A node arriving after the job ended was never waiting in it: RendezvousClosed.
      throw_if_closed();
      if (!last_round_) waited_outside_ = true;
      if (!room) {
        stand_by(round + 1);
      } else {
        DDP_LOG_INFO("rendezvous '" + options_.run_id + "': round " + std::to_string(round) +
                     " closed before this node arrived (arrival " + std::to_string(idx) +
                     (finishing ? "); its nodes are finishing, waiting for the next round"
                                : "); asked the running nodes to re-form"));
      }
      // A survivor of the previous round is expected in the next one whoever opens it: later
      // than this re-formed round's last call, it opens the next round itself (the members it
      // just asked to re-form come there) instead of waiting for one of them to.
      const bool survivor = last_round_ && *last_round_ + 1 == round;
      ++round;
      admitted = survivor && room && !finishing;
      if (admitted) {
        store_->set(keys::opened(round), "1");
        advance_current_round(round);
        DDP_LOG_INFO("rendezvous '" + options_.run_id + "': a member of round " +
                     std::to_string(*last_round_) + " re-joining, this node opened round " +
                     std::to_string(round));
      }
      continue;
    }
    RendezvousInfo info = make_info(round, parse_assignment(*assignment));
    if (options_.worker_store && !find_worker_store(info)) {
      // Group rank 0 died between the close and its store: it is out for good, and this
      // node opens the next round as a member re-joining (every survivor does the same).
      const ExitBarrier barrier{*store_, keys::departed(round), info.group_world_size};
      barrier.count_out(0, "disconnected");
      last_round_ = round;
      prev_rank_ = info.group_rank;
      last_info_size_ = info.group_world_size;
      round = round + 1;
      open_round(round);
      admitted = true;
      continue;
    }
    last_round_ = round;
    prev_rank_ = info.group_rank;
    last_info_size_ = info.group_world_size;
    if (options_.dial) {
      // Who carries the store on if its host is lost: every member's standby, by group rank.
      Succession succession;
      succession.round = round;
      succession.members = info.group_world_size;
      succession.self = info.group_rank;
      succession.store = store_endpoint();
      succession.standbys =
          parse_standbys(read_if_present(*store_, keys::standbys(round)).value_or(""));
      succession_ = succession;
    }
    {
      std::lock_guard<std::mutex> lock(conn_mu_);
      last_info_ = info;
    }
    if (options_.watch_membership) start_watcher(info);
    if (standing_by_) {
      standing_by_ = false;
      mark_spare_place(*store_, "admitted");
      DDP_LOG_INFO("rendezvous '" + options_.run_id + "': admitted as a spare in round " +
                   std::to_string(round) + " (group rank " + std::to_string(info.group_rank) +
                   " of " + std::to_string(info.group_world_size) + ")");
      notify_spare(
          SpareNotice{SpareNotice::Kind::kAdmitted, round, options_.max_nodes, info.group_rank});
    }
    return info;
  }
}

uint64_t DynamicRendezvous::start_round() {
  // ADD 0 reads the counter in one request (and creates it as "0" on a fresh store).
  return static_cast<uint64_t>(store_->add(keys::kCurrentRound, 0));
}

void DynamicRendezvous::open_round(uint64_t round) {
  // Out of the previous round: its store host no longer waits for this node there.
  const ExitBarrier previous{*store_, keys::departed(round - 1), last_info_size_};
  previous.count_out(prev_rank_, "rejoined");
  store_->set(keys::opened(round), "1");
  // Tell the other members of the previous round (if still running) to re-join too.
  post_change(*store_, round - 1, "rejoin");
  advance_current_round(round);
}

void DynamicRendezvous::advance_current_round(uint64_t round) {
  advance_current_round(round, *store_);
}

void DynamicRendezvous::advance_current_round(uint64_t round, Store& store) {
  // current_round only moves forward; a stale member must not move it back.
  std::string current = store.compare_set(keys::kCurrentRound, "", std::to_string(round));
  while (std::stoull(current) < round) {
    current = store.compare_set(keys::kCurrentRound, current, std::to_string(round));
  }
}

void DynamicRendezvous::stand_by(uint64_t round) {
  if (standing_by_) return;  // said once per standing by
  standing_by_ = true;
  if (spare_place_ == 0) {
    spare_place_ = store_->take_ticket(keys::kSpareQueue);
  }
  store_->set(keys::spare(spare_place_), "waiting");
  DDP_LOG_INFO("rendezvous '" + options_.run_id + "': standing by as a spare for job " +
               options_.run_id + " (group full at " + std::to_string(options_.max_nodes) +
               " nodes); it is admitted when a member leaves");
  notify_spare(SpareNotice{SpareNotice::Kind::kStandingBy, round, options_.max_nodes, -1});
}

void DynamicRendezvous::notify_spare(const SpareNotice& notice) {
  std::function<void(const SpareNotice&)> on_spare;
  {
    std::lock_guard<std::mutex> lock(mu_);
    on_spare = on_spare_;
  }
  if (on_spare) on_spare(notice);
}

void DynamicRendezvous::watch_spare(const std::function<void(const SpareNotice&)>& on_spare) {
  std::lock_guard<std::mutex> lock(mu_);
  on_spare_ = on_spare;
}

int64_t DynamicRendezvous::spares_ahead() const {
  if (spare_place_ <= 1) return 0;
  std::vector<std::string> ahead;
  for (int64_t place = 1; place < spare_place_; ++place) ahead.push_back(keys::spare(place));
  const auto states = store_->multi_get(ahead);
  return std::count(states.begin(), states.end(), std::string("waiting"));
}

void DynamicRendezvous::mark_spare_place(Store& store, const std::string& what) const {
  if (spare_place_ == 0) return;
  try {
    store.set(keys::spare(spare_place_), what);
  } catch (const std::exception& e) {
    // The spares after it wait for it at most last_call_timeout per round.
    DDP_LOG_WARN("rendezvous '" + options_.run_id + "': could not mark spare place " +
                 std::to_string(spare_place_) + " " + what + ": " + e.what());
  }
}

void DynamicRendezvous::workers_ready() {
  std::lock_guard<std::mutex> lock(mu_);
  workers_ready_ = true;
  ready_cv_.notify_all();
}

void DynamicRendezvous::await_workers(uint64_t round, const Deadline& deadline) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!on_spare_) return;  // nobody to start workers ahead (a bare rendezvous)
    workers_ready_ = false;
  }
  notify_spare(SpareNotice{SpareNotice::Kind::kJoining, round + 1, options_.max_nodes, -1});
  std::unique_lock<std::mutex> lock(mu_);
  while (!workers_ready_ && !deadline.expired()) {
    // Sliced, so that a shutdown from another thread (the agent told to stop) ends it.
    ready_cv_.wait_for(lock, std::min(kSpareLeaveCheck, deadline.remaining()));
    lock.unlock();
    throw_if_closed();
    throw_if_left("before it joined the running group");
    lock.lock();
  }
}

void DynamicRendezvous::wait_admitted(uint64_t round, const Deadline& deadline, bool spare) const {
  const auto started = Clock::now();
  const auto throw_if_spare_left = [&] {
    if (spare) throw_if_left("while it stood by as a spare");
  };
  while (true) {
    try {
      // The wake is also how a spare learns the job ended (closing opens the next round).
      store_->wait({keys::opened(round)},
                   spare ? std::min(options_.progress_interval, kSpareLeaveCheck)
                         : deadline.slice(options_.progress_interval));
      if (spare) throw_if_closed();
      throw_if_spare_left();
      return;
    } catch (const StoreTimeout&) {
    }
    throw_if_spare_left();
    throw_if_closed();
    if (spare) continue;  // quiet: the line said it once
    const auto waited = std::chrono::duration_cast<Duration>(Clock::now() - started);
    if (deadline.expired()) {
      throw RendezvousError(
          "rendezvous '" + options_.run_id + "' on " + store_->describe() +
          ": not admitted within join_timeout " + seconds_text(options_.join_timeout) + ": round " +
          std::to_string(round - 1) + " is running and no member re-joined to open round " +
          std::to_string(round));
    }
    DDP_LOG_INFO("rendezvous '" + options_.run_id + "': waiting " + seconds_text(waited) +
                 " for the running round " + std::to_string(round - 1) + " to admit this node");
  }
}

void DynamicRendezvous::yield_to_members(uint64_t round) {
  const auto deadline = Deadline::after(options_.last_call_timeout);
  while (!deadline.expired()) {
    const Closing previous = read_closing(round - 1, 1);
    if (previous.count <= 0) return;  // shut down (the next check says so), or never closed
    const ExitBarrier barrier{*store_, keys::departed(round - 1), static_cast<int>(previous.count)};
    // Every member out, and those re-joining (neither gone nor found silent) arrived, and
    // so did the spares before this one that still wait.
    const int64_t out = store_->add(barrier.key, 0);
    if (out >= previous.count) {
      const int64_t members_back = out - barrier.gone() - barrier.lost();
      if (store_->tickets(keys::arrived(round)) >= members_back + spares_ahead()) return;
    }
    throw_if_closed();
    throw_if_left("while it stood by as a spare");
    std::this_thread::sleep_for(std::min(kSpareYieldPoll, deadline.remaining()));
  }
}

void DynamicRendezvous::wait_closed(uint64_t round, int64_t idx, const Deadline& deadline) {
  const std::string& run = options_.run_id;
  const std::string closed_key = keys::closed(round);
  // With min == max the round closes when min is reached: wait for that directly.
  const bool fixed_size = options_.min_nodes == options_.max_nodes;
  // Phase 1: until min_nodes arrived (join_timeout), with a progress line now and then.
  if (idx < options_.min_nodes) {
    const std::string& phase1_key = fixed_size ? closed_key : keys::min_reached(round);
    while (true) {
      try {
        store_->wait({phase1_key}, deadline.slice(options_.progress_interval));
        break;
      } catch (const StoreTimeout&) {
      }
      const int64_t joined = store_->tickets(keys::arrived(round));
      const std::string count = std::to_string(joined) + "/" + std::to_string(options_.min_nodes) +
                                " nodes joined (min " + std::to_string(options_.min_nodes) +
                                ", max " + std::to_string(options_.max_nodes) + ")";
      if (deadline.expired()) {
        store_->set(keys::node(round, idx), "");  // withdraw: the closer skips this slot
        throw RendezvousError("rendezvous '" + run + "' on " + store_->describe() + " round " +
                              std::to_string(round) + ": only " + count + " within join_timeout " +
                              seconds_text(options_.join_timeout) + after_change());
      }
      DDP_LOG_INFO("rendezvous '" + run + "' round " + std::to_string(round) + ": " + count);
    }
    if (fixed_size) return;
  }
  // Phase 2: the last call. Whoever's window ends first claims the round with the arrivals
  // so far and publishes it; the others wait for that. Not waiting for members found silent,
  // a re-formed round is also checked again now and then: a member may be counted out as
  // lost after the last survivor arrived (its finder reports before it writes the count).
  // The first arrival alone does that, so the store's load does not grow with the nodes.
  const Duration last_call_timeout = std::max(options_.last_call_timeout, Duration(1));
  const auto last_call = Deadline::after(last_call_timeout);
  const bool recheck = !options_.wait_for_lost && round > 0 && idx == 1;
  while (true) {
    try {
      store_->wait({closed_key}, recheck ? last_call.slice(kLostRecheck) : last_call_timeout);
      return;
    } catch (const StoreTimeout&) {
    }
    if (!recheck || last_call.expired()) break;
    if (const int64_t count = complete_count(round); count > 0) {
      if (try_claim(round, count, idx)) {
        publish_round(round, count, idx);
        return;
      }
      break;  // another node claimed it: wait for its publication below
    }
  }
  const int64_t count =
      std::min<int64_t>(store_->tickets(keys::arrived(round)), options_.max_nodes);
  if (try_claim(round, count, idx)) {
    publish_round(round, count, idx);
    return;
  }
  try {
    store_->wait({closed_key}, options_.close_timeout);
  } catch (const StoreTimeout&) {
    throw RendezvousError("rendezvous '" + run + "' on " + store_->describe() + " round " +
                          std::to_string(round) + ": the closing node (" +
                          read_if_present(*store_, keys::closing(round)).value_or("no claim") +
                          ") did not publish ranks within close_timeout " +
                          seconds_text(options_.close_timeout) + " (it may have died)");
  }
}

void DynamicRendezvous::close_if_complete(uint64_t round, int64_t idx, bool member_back) {
  store_->add(member_back ? keys::rejoined(round) : keys::newcomers(round), 1);
  const int64_t count = complete_count(round);
  // Any arrival may get here; the claim lets exactly one publish.
  if (count > 0 && try_claim(round, count, idx)) publish_round(round, count, idx);
}

int64_t DynamicRendezvous::complete_count(uint64_t round) {
  // A re-formed round knows whom to expect: the members of the previous round that are not
  // gone for good (disconnected, failed, finished), nor found silent when options_ say not
  // to wait for those, and the nodes that arrived there too late (they are admitted now).
  // Once all of them are in, nobody else is expected: close now instead of waiting out
  // last_call_timeout (a lost node then costs round trips, not the last call).
  // Members and newcomers are counted apart, so a member wrongly thought lost that comes
  // back anyway never stands in for a newcomer still on its way.
  if (round == 0) return 0;
  const auto previous_closed = read_if_present(*store_, keys::closed(round - 1));
  if (!previous_closed) return 0;
  int64_t members = 0;
  std::from_chars(previous_closed->data(), previous_closed->data() + previous_closed->size(),
                  members);
  if (members <= 0) return 0;  // shut down
  const ExitBarrier previous{*store_, keys::departed(round - 1), static_cast<int>(members)};
  const int64_t late = std::max<int64_t>(0, store_->tickets(keys::arrived(round - 1)) - members);
  const int64_t members_back = store_->add(keys::rejoined(round), 0);
  const int64_t newcomers = store_->add(keys::newcomers(round), 0);
  const int64_t expected =
      members - previous.gone() - (options_.wait_for_lost ? 0 : previous.lost());
  if (members_back < expected || newcomers < late) return 0;
  const int64_t count =
      std::min<int64_t>(store_->tickets(keys::arrived(round)), options_.max_nodes);
  return count < options_.min_nodes ? 0 : count;
}

bool DynamicRendezvous::try_claim(uint64_t round, int64_t count, int64_t idx) {
  // The claimer's arrival index makes the value unique, so exactly one node wins.
  const std::string desired = std::to_string(count) + " " + std::to_string(idx);
  return store_->compare_set(keys::closing(round), "", desired) == desired;
}

DynamicRendezvous::Closing DynamicRendezvous::read_closing(uint64_t round, int64_t idx) {
  if (idx > options_.max_nodes) return Closing{options_.max_nodes, 0};  // full, never waited
  const std::string key = keys::closed(round);
  const std::string value = read_if_present(*store_, key).value_or("");
  Closing closing;
  const char* end = value.data() + value.size();
  auto first = std::from_chars(value.data(), end, closing.count);
  auto second = first.ec == std::errc() && first.ptr != end && *first.ptr == ' '
                    ? std::from_chars(first.ptr + 1, end, closing.closer)
                    : std::from_chars_result{first.ptr, std::errc::invalid_argument};
  if (second.ec != std::errc() || second.ptr != end) {
    throw ProtocolError("rendezvous '" + options_.run_id + "': key '" + key + "' holds '" + value +
                        "', expected '<count> <closer>'");
  }
  return closing;
}

void DynamicRendezvous::publish_round(uint64_t round, int64_t count, int64_t closer) {
  std::vector<std::string> node_keys;
  for (int64_t i = 1; i <= count; ++i) node_keys.push_back(keys::node(round, i));
  // Records are written right after each ADD; a slot still empty after close_timeout is a
  // node that died in between, and is left out.
  std::vector<std::optional<NodeRecord>> arrivals(static_cast<size_t>(count));
  std::vector<std::string> present = node_keys;
  try {
    store_->wait(node_keys, options_.close_timeout);
  } catch (const StoreTimeout&) {
    present.clear();
    for (const auto& k : node_keys) {
      if (store_->check({k})) present.push_back(k);
    }
  }
  const auto values = store_->multi_get(present);
  std::vector<std::string> standby_keys;
  for (size_t p = 0, i = 0; i < node_keys.size(); ++i) {
    if (p < present.size() && present[p] == node_keys[i]) {
      if (!values[p].empty()) arrivals[i] = parse_record(values[p]);
      ++p;
    }
    standby_keys.push_back(keys::standby(round, static_cast<int64_t>(i) + 1));
  }
  const auto assignments = assign_ranks(arrivals);
  // Each member's standby by group rank (written with its record: there when the record is).
  std::vector<Endpoint> standbys;
  if (options_.dial) {
    std::vector<std::string> known;
    for (size_t i = 0; i < standby_keys.size(); ++i) {
      if (assignments[i]) known.push_back(standby_keys[i]);
    }
    const auto texts = store_->multi_get(known);
    for (size_t i = 0, k = 0; i < assignments.size(); ++i) {
      if (!assignments[i]) continue;
      const auto g = static_cast<size_t>(assignments[i]->group_rank);
      if (standbys.size() <= g) standbys.resize(g + 1);
      if (!texts[k].empty()) standbys[g] = parse_endpoint(texts[k], 0);
      ++k;
    }
  }
  std::vector<std::string> out_keys;
  std::vector<std::string> out_values;
  for (size_t i = 0; i < assignments.size(); ++i) {
    if (!assignments[i]) continue;
    out_keys.push_back(keys::assign(round, static_cast<int64_t>(i) + 1));
    out_values.push_back(format_assignment(*assignments[i]));
  }
  // A store may take only so many keys in one atomic write (etcd: 128 operations per
  // transaction). Beyond that the assignments go first, in chunks, and "closed" last: whoever
  // sees "closed" still finds its assignment.
  if (out_keys.size() + 2 > kMaxKeysPerWrite) {
    for (size_t begin = 0; begin < out_keys.size(); begin += kMaxKeysPerWrite) {
      const size_t end = std::min(out_keys.size(), begin + kMaxKeysPerWrite);
      store_->multi_set({out_keys.begin() + static_cast<std::ptrdiff_t>(begin),
                         out_keys.begin() + static_cast<std::ptrdiff_t>(end)},
                        {out_values.begin() + static_cast<std::ptrdiff_t>(begin),
                         out_values.begin() + static_cast<std::ptrdiff_t>(end)});
    }
    out_keys.clear();
    out_values.clear();
  }
  if (options_.dial) {
    out_keys.push_back(keys::standbys(round));
    out_values.push_back(format_standbys(standbys));
  }
  // The size serves agents that are not members (the store host's exit barrier).
  out_keys.push_back(keys::size(round));
  out_values.push_back(std::to_string(std::count_if(assignments.begin(), assignments.end(),
                                                    [](const auto& a) { return a.has_value(); })));
  // "closed" goes in the same atomic MULTI_SET: whoever sees it finds its assignment.
  out_keys.push_back(keys::closed(round));
  out_values.push_back(std::to_string(count) + " " + std::to_string(closer));
  store_->multi_set(out_keys, out_values);
}

RendezvousInfo DynamicRendezvous::make_info(uint64_t round, const NodeAssignment& a) const {
  RendezvousInfo info;
  info.round = round;
  info.group_rank = a.group_rank;
  info.group_world_size = a.group_world_size;
  info.rank_offset = a.rank_offset;
  info.world_size = a.world_size;
  const Endpoint store = store_endpoint();
  info.master_addr = store.host;
  info.master_port = store.port;
  info.members = a.members;
  DDP_LOG_INFO("rendezvous '" + options_.run_id + "' round " + std::to_string(round) +
               " complete: " + std::to_string(a.group_world_size) + " nodes, group rank " +
               std::to_string(a.group_rank) + ", ranks " + std::to_string(a.rank_offset) + ".." +
               std::to_string(a.rank_offset + options_.local_world_size - 1) + " of " +
               std::to_string(a.world_size));
  return info;
}

bool DynamicRendezvous::find_worker_store(RendezvousInfo& info) {
  const std::string key = keys::worker_store(info.round);
  Endpoint endpoint;
  if (info.group_rank == 0) {
    endpoint = options_.worker_store->host();
    store_->set(key, format_endpoint(endpoint));
  } else {
    try {
      store_->wait({key}, options_.close_timeout);
    } catch (const StoreTimeout&) {
      DDP_LOG_WARN("rendezvous '" + options_.run_id + "' round " + std::to_string(info.round) +
                   ": group rank 0 did not publish the workers' store within close_timeout (" +
                   seconds_text(options_.close_timeout) + "): it is gone; re-forming without it");
      return false;
    }
    endpoint = parse_endpoint(store_->get(key), 0);
  }
  options_.worker_store->use(endpoint);
  info.master_addr = endpoint.host;
  info.master_port = endpoint.port;
  const uint64_t round = info.round;
  options_.worker_store->witness(round, info.group_rank, info.group_world_size, endpoint,
                                 [this, round](int g) { end_dead_presence(round, g); });
  return true;
}

void DynamicRendezvous::end_dead_presence(uint64_t round, int g) {
  try {
    auto store = side_connection();
    const auto token = read_if_present(*store, keys::presence_token(round, g));
    if (!token) {
      DDP_LOG_DEBUG("rendezvous '" + options_.run_id + "': group rank " + std::to_string(g) +
                    " closed its connection to the workers' store but published no presence "
                    "token" +
                    in_round_text(round));
      return;  // it never bound its presence: the monitor finds that
    }
    DDP_LOG_WARN("rendezvous '" + options_.run_id + "': node with group rank " + std::to_string(g) +
                 " closed its connection to the workers' store: it is gone; ending its presence "
                 "now instead of waiting for it to expire" +
                 in_round_text(round));
    store->end_presence(*token);
  } catch (const std::exception& e) {
    DDP_LOG_WARN("rendezvous '" + options_.run_id + "': could not end the presence of group rank " +
                 std::to_string(g) + " (its lease expires instead): " + e.what());
  }
}

bool DynamicRendezvous::serves_store(const RendezvousInfo& info) const {
  if (options_.worker_store && info.group_rank == 0) return true;
  if (!options_.dial) return options_.hosts_store;
  // The store may have moved: whoever's standby it is now serves it.
  const Endpoint store = store_endpoint();
  return store.host == options_.standby.host && store.port == options_.standby.port;
}

std::string DynamicRendezvous::after_change() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_reason_.text.empty() ? std::string()
                                   : " (the group re-formed because " + last_reason_.text + ")";
}

void DynamicRendezvous::throw_if_closed() const {
  if (store_->check({keys::kClosed})) throw_closed();
}

void DynamicRendezvous::throw_if_left(const std::string& when) const {
  if (spare_left_) {
    throw RendezvousClosed("rendezvous '" + options_.run_id + "': this node left " + when);
  }
}

void DynamicRendezvous::throw_closed() const {
  const std::string where = "rendezvous '" + options_.run_id + "' on " + store_->describe();
  // A spare (a member that lost its place counts too), or a node that waited for room and
  // never got in: the job did not need it.
  if (standing_by_ || (waited_outside_ && !last_round_)) {
    throw NotNeeded(
        where + ": the job finished without needing this node (" + node_id_ +
        (standing_by_ ? "), which stood by as a spare" : "), which waited for a round with room"));
  }
  throw RendezvousClosed(where + " is closed: the job has ended; this node (" + node_id_ +
                         ") was not part of it");
}

void DynamicRendezvous::watch(std::function<void(MembershipChange)> on_change) {
  std::optional<MembershipChange> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    on_change_ = std::move(on_change);
    pending.swap(pending_);
  }
  // A change that happened before anyone listened is delivered now.
  if (pending && on_change_) on_change_(*pending);
}

void DynamicRendezvous::on_change(MembershipChange change, const ChangeReason& reason) {
  std::function<void(MembershipChange)> callback;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_reason_ = reason;
    if (!on_change_) {
      pending_ = change;
      return;
    }
    callback = on_change_;
  }
  DDP_LOG_INFO("rendezvous '" + options_.run_id + "': " + reason.text);
  if (change == MembershipChange::kSteppedDown) {
    std::optional<uint64_t> round;
    {
      std::lock_guard<std::mutex> lock(conn_mu_);
      if (last_info_) round = last_info_->round;
    }
    if (round) step_down(*round);
  }
  callback(change);
}

std::shared_ptr<Store> DynamicRendezvous::side_connection() {
  if (options_.dial) {
    return std::make_shared<PrefixStore>("/ddp_rdzv/" + options_.run_id,
                                         options_.dial(store_endpoint(), kSideConnectTimeout));
  }
  return std::make_shared<PrefixStore>("/ddp_rdzv/" + options_.run_id, connect_());
}

void DynamicRendezvous::start_watcher(const RendezvousInfo& info) {
  std::lock_guard<std::mutex> lock(conn_mu_);
  if (shut_down_) return;
  // Opened now, while the store is known to be up, for a later shutdown().
  if (!control_store_) control_store_ = side_connection();
  RoundWatcherOptions w;
  w.round = info.round;
  w.group_rank = info.group_rank;
  w.group_world_size = info.group_world_size;
  w.heartbeat_interval = options_.heartbeat_interval;
  w.lease_timeout = options_.lease_timeout;
  bind_presence(info);
  // Where the store keeps liveness (etcd leases) nobody beats, so beating alone would only
  // make this node take its silent neighbours for lost: no fallback there.
  w.heartbeats = options_.heartbeats;
  // The node serving a store that can move watches whether its round still hears it: with
  // most of the round silent it steps down (store_succession.hpp).
  w.quorum = static_cast<bool>(options_.dial) && options_.heartbeats && serves_store(info);
  w.tolerance = options_.tolerance;
  watcher_ = std::make_unique<RoundWatcher>(
      w, side_connection(), side_connection(),
      [this](MembershipChange change, const ChangeReason& reason) { on_change(change, reason); });
}

void DynamicRendezvous::bind_presence(const RendezvousInfo& info) {
  // A presence that broke (an etcd lease that expired during a long pause or a cut link) is
  // replaced by a new one, once per round: without it the others could not see this node die.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (try_bind_presence(info, attempt == 1)) return;
  }
}

bool DynamicRendezvous::try_bind_presence(const RendezvousInfo& info, bool last) {
  try {
    if (!presence_tried_) {
      presence_tried_ = true;
      presence_ = store_->open_presence();
      if (!presence_) {
        DDP_LOG_INFO("rendezvous '" + options_.run_id + "': the store at " + store_->describe() +
                     " keeps no connection-bound records; a lost node is seen after "
                     "lease_timeout only");
      }
    }
    if (!presence_) return true;
    presence_->clear();
    // "alive" first: between the two, a claim must not find this node bound but not alive.
    presence_->set_ephemeral(keys::alive(info.round, info.group_rank), node_id_);
    store_->set(keys::bound(info.round, info.group_rank), node_id_);
    presence_->on_close(keys::changed(info.round, 1), "lost " + std::to_string(info.group_rank));
    if (const std::string token = presence_->token(); !token.empty()) {
      store_->set(keys::presence_token(info.round, info.group_rank), token);
    }
    return true;
  } catch (const StoreError& e) {
    presence_.reset();        // the watcher reports a store that is gone
    presence_tried_ = false;  // the next attempt (or round) opens a new one
    // A presence connection that died with a cut link is found here, on its first use after
    // the link came back: the retry opens a new one, so only the last failure is a warning.
    const std::string line = "rendezvous '" + options_.run_id +
                             "': no presence in the store: " + e.what() +
                             (last ? "" : "; opening a new one");
    if (last) {
      DDP_LOG_WARN(line);
    } else {
      DDP_LOG_INFO(line);
    }
    return false;
  }
}

// --- store succession ---

void DynamicRendezvous::throw_if_stepped_down() const {
  if (!options_.dial || !store_->check({keys::kSteppedDown})) return;
  throw StoreError("rendezvous '" + options_.run_id + "': the store at " + store_->describe() +
                       " stepped down (its host heard nothing from most of its round)",
                   PeerLoss::kSilence);
}

void DynamicRendezvous::step_down(uint64_t round) {
  try {
    store_->set(keys::kSteppedDown, std::to_string(round));
    post_change(*store_, round, "stepped_down");
  } catch (const StoreError& e) {
    DDP_LOG_WARN("rendezvous '" + options_.run_id +
                 "': could not mark the store stepped down: " + e.what());
  }
}

void DynamicRendezvous::fail_over(PeerLoss how, const Deadline& deadline) {
  const Succession succession = *succession_;
  const auto lost_at = Clock::now();
  bool host_dead = how == PeerLoss::kDeath;
  const std::vector<Endpoint> order = successors(succession);
  std::string names;
  for (const auto& c : order) names += (names.empty() ? "" : ", ") + format_endpoint(c);
  DDP_LOG_WARN("rendezvous '" + options_.run_id + "': the store at " +
               format_endpoint(succession.store) + " is lost (" +
               (host_dead ? "its host closed, reset or refused the connection"
                          : "silent for longer than the peer tolerance, or it stepped down") +
               "); moving to a successor's store (in turn: " + names + ")");
  std::set<std::string> dead;                   // successors this node found dead
  std::map<std::string, BallotRecord> ballots;  // what it did at each candidate
  auto next_line = lost_at + options_.progress_interval;
  while (true) {
    throw_if_shut_down();
    if (!host_dead) {
      // Silence may end: the lost store serves on if it answers and did not step down.
      const LostStore back = try_lost_store(succession, ballots, dead);
      if (back == LostStore::kMovedBack) return;
      host_dead = back == LostStore::kDead;
    }
    // This node's vote goes to the first successor it has not found dead, and stays there
    // while that one is only silent (store_takeover.hpp).
    const auto target = std::find_if(order.begin(), order.end(), [&](const Endpoint& e) {
      return dead.count(format_endpoint(e)) == 0;
    });
    if (target == order.end() && host_dead) {
      throw RendezvousError("rendezvous '" + options_.run_id + "': the store at " +
                            format_endpoint(succession.store) +
                            " was lost and every successor's store is gone too (" + names + ")");
    }
    bool found_dead = false;
    if (target != order.end()) {
      try {
        if (vote_at(succession, *target, host_dead, dead, ballots[format_endpoint(*target)],
                    lost_at)) {
          return;
        }
      } catch (const StoreError& e) {
        // A refusal is a death: that node's agent is gone (its standby listened all along).
        if (e.loss() == PeerLoss::kDeath) {
          dead.insert(format_endpoint(*target));
          found_dead = true;
        }
      }
    }
    if (deadline.expired()) {
      throw RendezvousError("rendezvous '" + options_.run_id + "': the store at " +
                            format_endpoint(succession.store) +
                            " was lost and no successor's store opened within join_timeout " +
                            seconds_text(options_.join_timeout) + " (tried " + names +
                            "; a successor opens when a strict majority of the " +
                            std::to_string(succession.members) + " nodes of round " +
                            std::to_string(succession.round) + " not found dead supports it)");
    }
    if (Clock::now() >= next_line) {
      DDP_LOG_INFO("rendezvous '" + options_.run_id + "': still looking for the store's " +
                   "successor (" + std::to_string(dead.size()) + " of " +
                   std::to_string(order.size()) + " gone)");
      next_line = Clock::now() + options_.progress_interval;
    }
    if (!found_dead) {
      std::this_thread::sleep_for(std::min<Duration>(deadline.remaining(), kSilenceRetry));
    }
  }
}

void DynamicRendezvous::throw_if_shut_down() {
  std::lock_guard<std::mutex> lock(conn_mu_);
  if (shut_down_) {
    throw RendezvousClosed("rendezvous '" + options_.run_id +
                           "' was shut down while this node looked for the store's successor");
  }
}

std::shared_ptr<Store> DynamicRendezvous::dial_rendezvous(const Endpoint& at) {
  return std::make_shared<PrefixStore>("/ddp_rdzv/" + options_.run_id,
                                       options_.dial(at, kSuccessorConnectTimeout));
}

DynamicRendezvous::LostStore DynamicRendezvous::try_lost_store(
    const Succession& succession, std::map<std::string, BallotRecord>& ballots,
    const std::set<std::string>& dead) {
  std::shared_ptr<Store> store;
  try {
    store = dial_rendezvous(succession.store);
    if (store->check({keys::kSteppedDown})) {
      fenced_seen_ = true;
      return LostStore::kGone;
    }
  } catch (const StoreError& e) {
    return e.loss() == PeerLoss::kDeath && !fenced_seen_ ? LostStore::kDead : LostStore::kGone;
  }
  // Back only once every vote this node cast elsewhere is void: a vote left standing could
  // make a majority for a store the job is no longer at.
  for (auto& [name, record] : ballots) {
    if (!record.voted_epoch) continue;
    const Endpoint candidate = parse_endpoint(name, 0);
    try {
      auto other = dial_rendezvous(candidate);
      TakeoverBallot ballot(*other, succession.round, succession.self, succession.members, record);
      if (!ballot.withdraw()) {  // it opened first: the job is there now
        reseed(*other, succession, dead);
        move_to(candidate, other);
        return LostStore::kMovedBack;
      }
    } catch (const StoreError& e) {
      if (e.loss() != PeerLoss::kDeath) return LostStore::kGone;  // try again later
      record.voted_epoch.reset();                                 // a dead store serves nobody
    }
  }
  move_to(succession.store, store);
  return LostStore::kMovedBack;
}

bool DynamicRendezvous::vote_at(const Succession& succession, const Endpoint& candidate,
                                bool host_dead, const std::set<std::string>& dead,
                                BallotRecord& record, Clock::time_point lost_at) {
  auto store = dial_rendezvous(candidate);
  // The group ranks this node knows dead: the successors it found dead, and the store's host
  // when its death is proven (its standby entry is the store itself).
  std::vector<int> dead_ranks;
  for (size_t g = 0; g < succession.standbys.size(); ++g) {
    const auto& e = succession.standbys[g];
    if (e.host.empty()) continue;
    const bool lost = e.host == succession.store.host && e.port == succession.store.port;
    if ((lost && host_dead) || dead.count(format_endpoint(e)) != 0) {
      dead_ranks.push_back(static_cast<int>(g));
    }
  }
  TakeoverBallot ballot(*store, succession.round, succession.self, succession.members, record);
  const auto until = Clock::now() + kSuccessorWait;
  while (true) {
    ballot.support(host_dead, dead_ranks);  // again after a withdrawal voided the epoch
    if (ballot.try_promote(Clock::now() - lost_at, options_.takeover_margin)) {
      reseed(*store, succession, dead);
      move_to(candidate, store);
      return true;
    }
    const auto left = std::chrono::duration_cast<Duration>(until - Clock::now());
    if (left <= Duration(0)) return false;
    try {
      ballot.wait_promoted(std::min<Duration>(left, Duration(250)));
    } catch (const StoreTimeout&) {
    }
  }
}

void DynamicRendezvous::reseed(Store& store, const Succession& s,
                               const std::set<std::string>& dead) {
  // The last round as its members knew it: its size and where it stood, and its lost store's
  // host and every member found dead counted out for good, so the re-formed round closes once
  // the others are back.
  advance_current_round(s.round, store);
  store.compare_set(keys::closed(s.round), "", std::to_string(s.members) + " 0");
  store.compare_set(keys::size(s.round), "", std::to_string(s.members));
  store.compare_set(keys::standbys(s.round), "", format_standbys(s.standbys));
  const ExitBarrier barrier{store, keys::departed(s.round), s.members};
  for (size_t g = 0; g < s.standbys.size(); ++g) {
    const auto& e = s.standbys[g];
    const bool lost = e.host == s.store.host && e.port == s.store.port;
    if (lost || dead.count(format_endpoint(e)) != 0) {
      barrier.count_out(static_cast<int>(g), "disconnected");
    }
  }
}

void DynamicRendezvous::move_to(const Endpoint& endpoint, std::shared_ptr<Store> store) {
  {
    std::lock_guard<std::mutex> lock(endpoint_mu_);
    store_endpoint_ = endpoint;
  }
  {
    std::lock_guard<std::mutex> lock(conn_mu_);
    control_store_.reset();
    presence_.reset();
    presence_tried_ = false;
  }
  store_ = std::move(store);
  fenced_seen_ = false;
  DDP_LOG_WARN("rendezvous '" + options_.run_id + "': the store is now " +
               format_endpoint(endpoint) + "; re-forming there");
}

void DynamicRendezvous::stop_watcher() {
  std::lock_guard<std::mutex> lock(conn_mu_);
  if (watcher_) {
    watcher_->request_stop();
    // The one before it was told to stop a whole round ago: joining it does not wait.
    retiring_ = std::move(watcher_);
  }
}

void DynamicRendezvous::shutdown() {
  leave(/*succeeded=*/true);
}

void DynamicRendezvous::shutdown_after_failure() {
  leave(/*succeeded=*/false);
}

void DynamicRendezvous::leave(bool succeeded) {
  // Leaving on purpose: the witness must not take this node's going for a death.
  if (options_.worker_store) options_.worker_store->stop_witness();
  std::unique_lock<std::mutex> lock(conn_mu_);
  retiring_.reset();
  if (shut_down_) return;
  shut_down_ = true;
  if (standing_by_ && !last_info_) {
    // A spare leaving ends nothing: the rendezvous stays open for the job's members. The
    // spares after it in the queue stop waiting for it.
    spare_left_ = true;
    try {
      if (!control_store_) control_store_ = side_connection();
      mark_spare_place(*control_store_, "left");
    } catch (const std::exception&) {
      // The store is unreachable: they wait for it at most last_call_timeout per round.
    }
    return;
  }
  // An orderly leave: this node is not lost. The presence goes after this node is counted
  // out, so nobody finds it gone while it is still counted in.
  std::unique_ptr<Presence> presence = std::move(presence_);
  try {
    if (!control_store_) control_store_ = side_connection();
    Store& store = *control_store_;
    // A failed job, or a node that never got into a round (a signal during rendezvous),
    // ends the rendezvous for everybody, as torchrun's shutdown does.
    bool job_over = !succeeded || !last_info_;
    if (last_info_) {
      const uint64_t round = last_info_->round;
      // "finished" first: from now on a late node does not make the others re-form.
      if (succeeded) store.set(keys::finished(round), "1");
      const ExitBarrier barrier{store, keys::departed(round), last_info_->group_world_size};
      job_over =
          barrier.count_out(last_info_->group_rank, succeeded ? "finished" : "failed") || job_over;
    }
    presence.reset();
    if (!job_over && serves_store(*last_info_)) {
      // Keep watching the others (a loss counts them out) but stop beating: this node is out.
      if (watcher_) watcher_->stop_beating();
      const RendezvousInfo info = *last_info_;
      lock.unlock();
      wait_for_members(store, info);
      // Whoever still runs (the barrier timed out, or this agent was told to stop) must not
      // take the store's going away for a failure.
      announce_leaving(store, info);
      lock.lock();
      job_over = true;
    }
    watcher_.reset();  // joins: no heartbeat may follow
    if (job_over) close_rendezvous(store);
    if (!succeeded && options_.hosts_store && last_info_) {
      // The store goes with this agent: the members still running read the record first.
      const RendezvousInfo info = *last_info_;
      lock.unlock();
      const ExitBarrier barrier{store, keys::departed(info.round), info.group_world_size};
      wait_for_failure_readers(barrier, info.round, info.group_rank,
                               [round = info.round](int g) { return keys::alive(round, g); });
    }
  } catch (const StoreError&) {
    // The store host may already be gone at the end of the job; nothing is left to close.
    watcher_.reset();
  }
}

void DynamicRendezvous::announce_leaving(Store& store, const RendezvousInfo& info) {
  // The others may have re-formed into a newer round since this node's: announce there.
  const auto round = static_cast<uint64_t>(store.add(keys::kCurrentRound, 0));
  int members = round == info.round ? info.group_world_size : 0;
  if (round != info.round) {
    if (auto size = read_if_present(store, keys::size(round))) members = std::stoi(*size);
  }
  const ExitBarrier barrier{store, keys::departed(round), members};
  std::vector<int> still_running;
  for (int g = 0; g < members; ++g) {
    if ((round != info.round || g != info.group_rank) && barrier.out_reason(g).empty()) {
      still_running.push_back(g);
    }
  }
  announce_store_leaving(store, round, info.group_rank,
                         options_.node_addr.empty() ? local_host_name() : options_.node_addr,
                         still_running);
}

void DynamicRendezvous::close_rendezvous(Store& store) {
  store.set(keys::kClosed, "1");
  // Wake whoever waits in the current or the next round: they see the rendezvous closed.
  const auto current = static_cast<uint64_t>(store.add(keys::kCurrentRound, 0));
  for (uint64_t round : {current, current + 1}) {
    store.compare_set(keys::closing(round), "", "-1 0");
    store.compare_set(keys::closed(round), "", "-1 0");
    store.multi_set({keys::min_reached(round), keys::opened(round)}, {"1", "1"});
  }
}

void DynamicRendezvous::wait_for_members(Store& store, const RendezvousInfo& info) {
  const auto deadline = Deadline::after(options_.exit_barrier_timeout);
  uint64_t round = info.round;
  int members = info.group_world_size;
  while (true) {
    const ExitBarrier barrier{store, keys::departed(round), members};
    const auto progress = [&] {
      return "the nodes of round " + std::to_string(round) + " (" +
             std::to_string(store.add(barrier.key, 0)) + "/" + std::to_string(members) + " out)";
    };
    if (!wait_interruptible(store, barrier.all_key(), "interrupted", deadline, progress)) return;
    if (store.get(barrier.all_key()) == "interrupted") return;
    // Everyone left that round. Those who re-joined a newer one still need the store.
    const auto current = static_cast<uint64_t>(store.add(keys::kCurrentRound, 0));
    if (current <= round) return;
    round = current;
    const auto forming = [round] {
      return "round " + std::to_string(round) + " to form (the others re-joined)";
    };
    if (!wait_interruptible(store, keys::closed(round), "-1 0", deadline, forming)) return;
    const std::string closed = store.get(keys::closed(round));
    if (closed.rfind("-1", 0) == 0) return;  // the rendezvous was shut down
    members = std::stoi(store.get(keys::size(round)));
    DDP_LOG_INFO("exit barrier: the other nodes re-formed into round " + std::to_string(round) +
                 " (" + std::to_string(members) +
                 " nodes); this node hosts the store and keeps serving it");
  }
}

bool DynamicRendezvous::wait_interruptible(Store& store, const std::string& key,
                                           const std::string& wake_value, const Deadline& deadline,
                                           const std::function<std::string()>& what) {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    if (interrupted_) return false;
    wake_key_ = key;
    wake_value_ = wake_value;
  }
  const auto started = Clock::now();
  while (true) {
    try {
      store.wait({key}, deadline.slice(options_.progress_interval));
      return true;
    } catch (const StoreTimeout&) {
    }
    const auto waited = std::chrono::duration_cast<Duration>(Clock::now() - started);
    if (deadline.expired()) {
      DDP_LOG_WARN("exit barrier: still waiting for " + what() + " after " +
                   seconds_text(options_.exit_barrier_timeout) +
                   " (exit_barrier_timeout); closing the store anyway");
      return false;
    }
    DDP_LOG_INFO("exit barrier: waiting " + seconds_text(waited) + " for " + what() +
                 "; this node hosts the store");
  }
}

void DynamicRendezvous::interrupt() {
  std::string key;
  std::string value;
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    interrupted_ = true;
    key = wake_key_;
    value = wake_value_;
  }
  if (key.empty()) return;
  try {
    // control_store_ is set before any wait starts and never replaced after.
    control_store_->compare_set(key, "", value);
  } catch (const StoreError&) {
  }
}

}  // namespace ddp::rendezvous
