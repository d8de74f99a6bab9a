#include "rendezvous/static_rendezvous.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>

#include "common/error.hpp"
#include "common/host_address.hpp"
#include "common/log.hpp"
#include "rendezvous/assignment.hpp"
#include "rendezvous/exit_barrier.hpp"
#include "rendezvous/failure_record.hpp"
#include "rendezvous/store/prefix_store.hpp"

namespace ddp::rendezvous {
namespace {

using Clock = std::chrono::steady_clock;

const std::string kClosedKey = "closed";
// Set by a node stopped before every node joined. Not kClosedKey: a node that joined, ran and
// finished closes the rendezvous too, and a node still waking from its go key must not take
// that for a stop.
const std::string kAbortedKey = "aborted";

std::string node_key(int node_rank) {
  return "node/" + std::to_string(node_rank);
}

// There exactly as long as node_rank's agent is connected to the store (its presence).
std::string alive_key(int node_rank) {
  return "alive/" + std::to_string(node_rank);
}

// Each node waits on a key of its own: the last node to join sets them all, and shutdown()
// sets them too, so a node told to stop is never left waiting for the others.
std::string go_key(int node_rank) {
  return "go/" + std::to_string(node_rank);
}

// Record "<nproc> <node_id>" -> nproc; throws ProtocolError naming the text.
int record_nproc(const std::string& text, int node_rank) {
  int nproc = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), nproc);
  if (ec != std::errc() || nproc < 1 || ptr == text.data() + text.size() || *ptr != ' ') {
    throw ProtocolError("static rendezvous: record of node_rank " + std::to_string(node_rank) +
                        " is '" + text + "', expected '<nproc> <node_id>'");
  }
  return nproc;
}

std::string record_id(const std::string& text) {
  const auto space = text.find(' ');
  return space == std::string::npos ? text : text.substr(space + 1);
}

}  // namespace

StaticRendezvous::StaticRendezvous(StaticRendezvousOptions options, std::shared_ptr<Store> store,
                                   StoreConnector connect)
    : options_(std::move(options)), connect_(std::move(connect)) {
  const auto& o = options_;
  if (o.nnodes < 1) {
    throw ConfigError("--nnodes " + std::to_string(o.nnodes) + ": expected at least 1");
  }
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    throw ConfigError("--node_rank " + std::to_string(o.node_rank) + ": expected 0.." +
                      std::to_string(o.nnodes - 1) + " for --nnodes " + std::to_string(o.nnodes));
  }
  if (o.local_world_size < 1) {
    throw ConfigError("nproc_per_node " + std::to_string(o.local_world_size) +
                      ": expected at least 1");
  }
  store_ = std::make_shared<PrefixStore>("/ddp_rdzv/" + o.run_id + "/static", std::move(store));
  node_id_ = make_node_id(o.node_addr);
  barrier_.emplace(*store_, "departed", o.nnodes, o.exit_barrier_timeout, o.progress_interval);
}

std::shared_ptr<Store> StaticRendezvous::connect_job_store() {
  if (!connect_) return nullptr;
  return std::make_shared<PrefixStore>("/ddp_rdzv/" + options_.run_id + "/static", connect_());
}

RendezvousInfo StaticRendezvous::next_rendezvous() {
  if (store_->check({kClosedKey})) {
    // A restart after another node finished: its ranks will never come back. The agent asks
    // restart_blocker() before it spends a restart; this catches a node that finished since.
    if (const auto blocker = info_ ? restart_blocker() : std::string(); !blocker.empty()) {
      throw RendezvousClosed("static rendezvous '" + options_.run_id + "' on " +
                             store_->describe() + ": cannot restart: " + blocker);
    }
    throw RendezvousClosed("static rendezvous '" + options_.run_id + "' on " + store_->describe() +
                           " is closed: the job has ended");
  }
  if (!info_) {
    join();
  } else {
    ++info_->round;
  }
  bind_presence(info_->round);
  return *info_;
}

std::string StaticRendezvous::finished_nodes() const {
  // A node that finishes closes the rendezvous before it counts itself out: one round trip
  // answers the usual case (nobody finished).
  if (!store_->check({kClosedKey})) return {};
  std::string finished;
  for (int r = 0; r < options_.nnodes; ++r) {
    if (r != options_.node_rank && barrier_->out_reason(r) == "finished") {
      finished += (finished.empty() ? "" : ", ") + std::to_string(r);
    }
  }
  return finished;
}

std::string StaticRendezvous::restart_blocker() {
  const auto finished = finished_nodes();
  if (finished.empty()) return {};
  return "node " + finished +
         " already finished (its workers succeeded) and a static job cannot restart without it";
}

void StaticRendezvous::bind_presence(uint64_t round) {
  std::lock_guard<std::mutex> lock(presence_mu_);
  if (shut_down_) return;
  try {
    if (!presence_tried_) {
      presence_tried_ = true;
      presence_ = store_->open_presence();
      if (!presence_) {
        DDP_LOG_INFO("static rendezvous '" + options_.run_id + "': the store at " +
                     store_->describe() +
                     " keeps no connection-bound records; a dead node is seen only through "
                     "its workers' errors");
      }
    }
    if (!presence_) return;
    FailureRecord lost;
    lost.kind = "node_lost";
    lost.attempt = round;
    lost.group_rank = options_.node_rank;
    lost.host = options_.node_addr.empty() ? local_host_name() : options_.node_addr;
    lost.pid = static_cast<int>(::getpid());
    lost.message =
        "its agent's connection to the store closed (the agent was killed or crashed, or its "
        "host went down)";
    presence_->clear();
    // "alive/<node_rank>" is there exactly as long as this agent's connection.
    presence_->set_ephemeral(alive_key(options_.node_rank), node_id_);
    presence_->on_close(failure_key(round), encode_failure(lost));
    // And for the next attempt: dying between attempts (while the others restart) is a loss
    // too, which the next bind_presence() would come too late for.
    lost.attempt = round + 1;
    presence_->on_close(failure_key(round + 1), encode_failure(lost));
  } catch (const StoreError& e) {
    presence_.reset();  // the failure watch reports a store that is gone
    DDP_LOG_WARN(std::string("static rendezvous: no presence in the store: ") + e.what());
  }
}

void StaticRendezvous::join() {
  const auto& o = options_;
  const std::string record = std::to_string(o.local_world_size) + " " + node_id_;
  const std::string mine = node_key(o.node_rank);
  const std::string held = store_->compare_set(mine, "", record);
  if (held != record) {
    throw ConfigError("--node_rank " + std::to_string(o.node_rank) +
                      " is already taken in rendezvous '" + o.run_id + "' on " +
                      store_->describe() + " by " + record_id(held) +
                      "; give each node a distinct node_rank (or a new --rdzv_id)");
  }
  std::vector<std::string> node_keys;
  std::vector<std::string> go_keys;
  for (int r = 0; r < o.nnodes; ++r) {
    node_keys.push_back(node_key(r));
    go_keys.push_back(go_key(r));
  }
  if (store_->add("joined", 1) == o.nnodes) {
    store_->multi_set(go_keys, std::vector<std::string>(go_keys.size(), "1"));
  }

  const auto started = Clock::now();
  const auto deadline = started + o.join_timeout;
  while (true) {
    const auto left = std::chrono::duration_cast<Duration>(deadline - Clock::now());
    try {
      store_->wait({go_key(o.node_rank)}, std::clamp(left, Duration(1), o.progress_interval));
      break;
    } catch (const StoreTimeout&) {
    }
    if (Clock::now() >= deadline) {
      throw RendezvousError("static rendezvous '" + o.run_id + "' on " + store_->describe() + ": " +
                            progress(node_keys) + " within join_timeout " +
                            describe_timeout(o.join_timeout));
    }
    DDP_LOG_INFO("static rendezvous '" + o.run_id + "': " + progress(node_keys));
  }
  if (store_->check({kAbortedKey})) {
    throw RendezvousClosed("static rendezvous '" + o.run_id + "' on " + store_->describe() +
                           " was closed while this node waited: another node stopped the job");
  }

  const auto records = store_->multi_get(node_keys);
  RendezvousInfo info;
  info.group_rank = o.node_rank;
  info.group_world_size = o.nnodes;
  for (int r = 0; r < o.nnodes; ++r) {
    const int nproc = record_nproc(records[static_cast<size_t>(r)], r);
    if (r < o.node_rank) info.rank_offset += nproc;
    info.world_size += nproc;
  }
  info.master_addr = o.master_addr;
  info.master_port = o.master_port;
  info_ = info;
  DDP_LOG_INFO("static rendezvous '" + o.run_id + "': all " + std::to_string(o.nnodes) +
               " nodes joined; this node has ranks " + std::to_string(info.rank_offset) + ".." +
               std::to_string(info.rank_offset + o.local_world_size - 1) + " of " +
               std::to_string(info.world_size));
}

std::string StaticRendezvous::progress(const std::vector<std::string>& node_keys) const {
  std::string missing;
  int joined = 0;
  for (size_t r = 0; r < node_keys.size(); ++r) {
    if (store_->check({node_keys[r]})) {
      ++joined;
    } else if (missing.size() < 200) {
      missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
  }
  return std::to_string(joined) + "/" + std::to_string(node_keys.size()) +
         " nodes joined (missing node_rank " + missing + ")";
}

void StaticRendezvous::watch(std::function<void(MembershipChange)> /*on_change*/) {}

void StaticRendezvous::shutdown_after_failure() {
  job_failed_ = true;
  shutdown();
}

void StaticRendezvous::shutdown() {
  if (shut_down_.exchange(true)) return;
  try {
    {
      std::lock_guard<std::mutex> lock(presence_mu_);
      presence_.reset();  // an orderly leave: this node is not lost
    }
    store_->set(kClosedKey, "1");
    if (!info_) {
      // Stopped before every node joined: wake the nodes still waiting to join.
      store_->set(kAbortedKey, "1");
      std::vector<std::string> go_keys;
      go_keys.reserve(static_cast<size_t>(options_.nnodes));
      for (int r = 0; r < options_.nnodes; ++r) go_keys.push_back(go_key(r));
      store_->multi_set(go_keys, std::vector<std::string>(go_keys.size(), "closed"));
      return;
    }
    barrier_->depart(options_.node_rank, job_failed_ ? "failed" : "finished",
                     options_.hosts_store && !job_failed_);
    if (options_.hosts_store && job_failed_) {
      // The store goes with this agent: the nodes still running read the record first.
      wait_for_failure_readers(*barrier_, info_->round, options_.node_rank, alive_key);
    }
    // The others may still run (the barrier timed out, or this agent was told to stop): the
    // store going away is not a failure of theirs.
    if (options_.hosts_store && !job_failed_) {
      std::vector<int> still_running;
      for (int r = 0; r < options_.nnodes; ++r) {
        if (r != options_.node_rank && barrier_->out_reason(r).empty()) still_running.push_back(r);
      }
      announce_store_leaving(*store_, info_->round, options_.node_rank,
                             options_.node_addr.empty() ? local_host_name() : options_.node_addr,
                             still_running);
    }
  } catch (const StoreError&) {
    // The store host may already be gone at the end of the job; nothing is left to close.
  }
}

void StaticRendezvous::interrupt() {
  // Only the store host waits on the barrier: waking it early harms nobody.
  try {
    barrier_->interrupt();
  } catch (const StoreError&) {
  }
}

}  // namespace ddp::rendezvous
