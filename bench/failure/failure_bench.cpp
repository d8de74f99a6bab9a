#include "failure_bench.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <thread>

#include "common/log.hpp"
#include "host_counters.hpp"
#include "quiet_round.hpp"
#include "rendezvous/dynamic_rendezvous.hpp"
#include "rendezvous/failure_watch.hpp"
#include "rendezvous/store/prefix_store.hpp"
#include "sim_store.hpp"

namespace ddp::bench {

using rendezvous::DynamicRendezvous;
using rendezvous::FailureRecord;
using rendezvous::FailureWatch;
using rendezvous::RendezvousInfo;
using rendezvous::Store;

namespace {

constexpr auto kGuard = std::chrono::seconds(60);

// Long enough for every simulated node's thread to be blocked in its WAIT (each opens its
// wait connection on first use) before the event is set off.
std::chrono::microseconds settle(size_t nodes) {
  return std::chrono::milliseconds(100) + std::chrono::microseconds(1000) * nodes;
}

FailureRecord worker_failure(int node) {
  FailureRecord r;
  r.kind = "worker";
  r.group_rank = node;
  r.host = "127.0.0.1";
  r.rank = node * 8;
  r.local_rank = 0;
  r.pid = 4242;
  r.exit_code = 3;
  r.time = rendezvous::unix_now();
  r.message = "failure_bench: simulated worker failure";
  return r;
}

// Every group rank exactly once in one round of `expected` nodes, or the benchmark measured
// something wrong.
void check_round(const std::vector<RendezvousInfo>& infos, size_t expected) {
  std::vector<int> ranks;
  for (const auto& i : infos) {
    if (i.round != infos.front().round || i.group_world_size != static_cast<int>(expected)) {
      throw std::runtime_error("failure_bench: the nodes do not agree on one round");
    }
    ranks.push_back(i.group_rank);
  }
  std::sort(ranks.begin(), ranks.end());
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks.size() != expected || ranks[i] != static_cast<int>(i)) {
      throw std::runtime_error("failure_bench: group ranks are not 0..N-1");
    }
  }
}

// One node's FailureWatch, as the agent makes it: two connections of its own, the watch
// thread's callback marking the node told.
std::unique_ptr<FailureWatch> make_watch(std::shared_ptr<Store> wait_store,
                                         std::shared_ptr<Store> publish_store, uint64_t attempt,
                                         Arrivals& told, size_t i) {
  rendezvous::FailureWatchCallbacks cb;
  cb.on_failure = [&told, i](const FailureRecord&) { told.mark(i); };
  cb.on_store_lost = [i](const std::string& message, PeerLoss) {
    std::fprintf(stderr, "failure_bench: node %zu lost the store: %s\n", i, message.c_str());
  };
  return std::make_unique<FailureWatch>(std::move(wait_store), std::move(publish_store), attempt,
                                        /*group_rank=*/-1, std::move(cb));
}

double floor_wake(const std::vector<std::shared_ptr<Store>>& stores, Store& setter,
                  const std::string& key) {
  Arrivals woke(stores.size());
  Clock::time_point set_at;
  std::thread trigger([&] {
    std::this_thread::sleep_for(settle(stores.size()));
    set_at = Clock::now();
    setter.set(key, "1");
  });
  std::exception_ptr error;
  try {
    on_threads(stores.size(), [&](size_t i) {
      stores[i]->wait({key}, kGuard);
      woke.mark(i);
    });
  } catch (...) {
    error = std::current_exception();
  }
  trigger.join();
  if (error) std::rethrow_exception(error);
  return millis(woke.last() - set_at);
}

}  // namespace

StopResult bench_stop(rendezvous::StoreServer& server, int nodes, int repeats) {
  StopResult result;
  const auto n = static_cast<size_t>(nodes);
  const uint16_t port = server.port();
  const std::string prefix = "/ddp_rdzv/stop-" + std::to_string(n);
  std::vector<std::shared_ptr<Store>> wait_stores;
  std::vector<std::shared_ptr<Store>> publish_stores;
  std::vector<std::shared_ptr<Store>> floor_stores;
  for (size_t i = 0; i < n; ++i) {
    wait_stores.push_back(std::make_shared<rendezvous::PrefixStore>(prefix, connect_store(port)));
    publish_stores.push_back(
        std::make_shared<rendezvous::PrefixStore>(prefix, connect_store(port)));
    floor_stores.push_back(connect_store(port));
  }
  const auto setter = connect_store(port);
  const size_t victim = n / 2;
  for (int rep = 0; rep < repeats; ++rep) {
    // The floor and the watch alternate which goes first, so drifting load hits both alike.
    if (rep % 2 == 0) {
      result.floor_ms.push_back(
          floor_wake(floor_stores, *setter, prefix + "/floor/" + std::to_string(rep)));
    }
    Arrivals told(n);
    std::vector<std::unique_ptr<FailureWatch>> watches;
    const auto attempt = static_cast<uint64_t>(rep);
    for (size_t i = 0; i < n; ++i) {
      watches.push_back(make_watch(wait_stores[i], publish_stores[i], attempt, told, i));
    }
    std::this_thread::sleep_for(settle(n));
    const auto published = Clock::now();
    watches[victim]->publish(worker_failure(static_cast<int>(victim)));
    for (size_t i = 0; i < n; ++i) told.wait_one(i, kGuard, "told of the failure");
    result.all_ms.push_back(millis(told.last() - published));
    result.first_ms.push_back(millis(told.first() - published));
    watches.clear();
    if (rep % 2 == 1) {
      result.floor_ms.push_back(
          floor_wake(floor_stores, *setter, prefix + "/floor/" + std::to_string(rep)));
    }
  }
  return result;
}

RestartResult bench_restart(rendezvous::StoreServer& server, int nodes, int min_nodes, int repeats,
                            int last_call_ms, int gap_ms) {
  RestartResult result;
  const auto n = static_cast<size_t>(nodes);
  const uint16_t port = server.port();
  const std::string run_id = "restart-" + std::to_string(n) + "-" + std::to_string(min_nodes);
  std::vector<std::unique_ptr<DynamicRendezvous>> agents;
  std::vector<std::shared_ptr<SimStore>> mains;  // each agent's main connection: its re-joins
  for (size_t i = 0; i < n; ++i) {
    auto o = elastic_options(run_id, min_nodes, nodes);
    o.last_call_timeout = std::chrono::milliseconds(last_call_ms);
    mains.push_back(std::make_shared<SimStore>(connect_store(port)));
    agents.push_back(std::make_unique<DynamicRendezvous>(o, mains.back(),
                                                         [port] { return connect_store(port); }));
  }
  std::vector<RendezvousInfo> infos(n);
  on_threads(n, [&](size_t i) { infos[i] = agents[i]->next_rendezvous(); });
  check_round(infos, n);
  const size_t victim = n / 2;
  for (int rep = 0; rep < repeats; ++rep) {
    std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));  // the workers' run time
    Arrivals told(n);
    Arrivals restarted(n);
    std::vector<std::unique_ptr<FailureWatch>> watches;
    for (size_t i = 0; i < n; ++i) {
      // The agent's job store: the rendezvous' prefix, connections of the watch's own.
      watches.push_back(make_watch(agents[i]->connect_job_store(), agents[i]->connect_job_store(),
                                   infos[i].round, told, i));
    }
    for (auto& m : mains) m->reset();
    Clock::time_point published;
    std::thread failing([&] {
      std::this_thread::sleep_for(settle(n));
      published = Clock::now();
      watches[victim]->publish(worker_failure(static_cast<int>(victim)));
    });
    std::exception_ptr error;
    try {
      // What each agent does on the record: stop its workers (not simulated), re-join.
      on_threads(n, [&](size_t i) {
        told.wait_one(i, kGuard, "told of the failure");
        infos[i] = agents[i]->next_rendezvous();
        restarted.mark(i);
      });
    } catch (...) {
      error = std::current_exception();
    }
    failing.join();
    if (error) std::rethrow_exception(error);
    check_round(infos, n);
    result.told_ms.push_back(millis(told.last() - published));
    result.restarted_ms.push_back(millis(restarted.last() - published));
    int64_t total = 0;
    for (const auto& m : mains) {
      total += m->requests();
      result.requests_max = std::max(result.requests_max, m->requests());
    }
    result.requests_mean = static_cast<double>(total) / static_cast<double>(n);
    watches.clear();
  }
  // Their watcher threads each take up to a heartbeat to stop: stop them all at once.
  on_threads(n, [&](size_t i) { agents[i].reset(); });
  return result;
}

namespace {

// "backlog drops / connections aborted on timeout" over one row, for its last column.
std::string counters_cell(const HostCounters& c) {
  return std::to_string(c.backlog_drops) + " / " + std::to_string(c.aborts_on_timeout);
}

// A row that could not be measured: what went wrong, and the run goes on with the next one.
void print_failed_row(const std::string& first_cells, const std::exception& e, bool& failed) {
  failed = true;
  std::printf("%s | failed: %s |\n", first_cells.c_str(), e.what());
  std::fflush(stdout);
}

void print_stop(const FailureBenchOptions& o, rendezvous::StoreServer& server, bool& failed) {
  std::printf(
      "## a. failure record -> every node told (its agent sends SIGTERM to its workers then)\n\n"
      "%d repeats; floor: one SET waking N plain WAITs, one per node, same connections' kind\n\n",
      o.repeats);
  std::printf(
      "| nodes | every node told, median (ms) | min | max | first node told, median (ms) | "
      "floor, median (ms) | told / floor | loopback drops / aborted connections |\n");
  std::printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (int n : o.nodes) {
    const auto before = HostCounters::read();
    try {
      const auto r = bench_stop(server, n, o.repeats);
      const auto all = summarize(r.all_ms);
      const auto floor = summarize(r.floor_ms);
      std::printf("| %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s |\n", n, all.median, all.min,
                  all.max, summarize(r.first_ms).median, floor.median,
                  floor.median > 0 ? all.median / floor.median : 0.0,
                  counters_cell(HostCounters::read().since(before)).c_str());
      std::fflush(stdout);
    } catch (const std::exception& e) {
      print_failed_row("| " + std::to_string(n), e, failed);
    }
  }
}

void print_restart(const FailureBenchOptions& o, rendezvous::StoreServer& server, bool& failed) {
  std::printf(
      "\n## b. failure record -> every node holds its next round (it would spawn its workers "
      "then)\n\n%d repeats (one restart each, the same agents, %d ms apart); last call %d ms\n\n",
      o.repeats, o.restart_gap_ms, o.last_call_ms);
  std::printf(
      "| nodes | --nnodes | round closed by | every node told, median (ms) | every node in the "
      "new round, median (ms) | min | max | store requests per node to re-join (mean / max) "
      "| loopback drops / aborted connections |\n");
  std::printf("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (int n : o.nodes) {
    std::vector<int> mins{n};  // MIN = MAX, then MIN < MAX
    if (std::max(1, n / 2) < n) mins.push_back(std::max(1, n / 2));
    for (int min_nodes : mins) {
      const char* closer = min_nodes == n ? "the MAX-th arrival" : "everyone expected back";
      const auto before = HostCounters::read();
      try {
        const auto r =
            bench_restart(server, n, min_nodes, o.repeats, o.last_call_ms, o.restart_gap_ms);
        const auto told = summarize(r.told_ms);
        const auto restarted = summarize(r.restarted_ms);
        std::printf("| %d | %d:%d | %s | %.2f | %.2f | %.2f | %.2f | %.1f / %lld | %s |\n", n,
                    min_nodes, n, closer, told.median, restarted.median, restarted.min,
                    restarted.max, r.requests_mean, static_cast<long long>(r.requests_max),
                    counters_cell(HostCounters::read().since(before)).c_str());
        std::fflush(stdout);
      } catch (const std::exception& e) {
        print_failed_row("| " + std::to_string(n) + " | " + std::to_string(min_nodes) + ":" +
                             std::to_string(n) + " | " + closer,
                         e, failed);
      }
    }
  }
}

void print_loss(const FailureBenchOptions& o, rendezvous::StoreServer& server, NodeFactory& factory,
                bool& failed) {
  std::printf(
      "\n## c. node loss: one agent (a process of its own) killed or stopped; --nnodes N-1:N\n\n"
      "heartbeat %d ms, lease %d ms; last call %d ms (presence rows), %d ms (lease rows)\n\n",
      o.heartbeat_ms, o.lease_ms, o.last_call_ms, o.lease_last_call_ms);
  std::printf(
      "| nodes | how | repeats | every survivor told, median (ms) | min | max | every survivor "
      "re-formed, median (ms) | min | max | re-formed / presence row | loopback drops / "
      "aborted connections |\n");
  std::printf("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  std::map<int, double> presence_reformed;
  auto row = [&](int n, LossKind kind, int repeats, int last_call_ms) {
    LossOptions lo;
    lo.nodes = n;
    lo.repeats = repeats;
    lo.kind = kind;
    lo.heartbeat_ms = o.heartbeat_ms;
    lo.lease_ms = o.lease_ms;
    lo.last_call_ms = last_call_ms;
    const auto before = HostCounters::read();
    try {
      const auto r = bench_loss(server, factory, lo);
      const auto told = summarize(r.told_ms);
      const auto reformed = summarize(r.reformed_ms);
      if (kind == LossKind::kKill) presence_reformed[n] = reformed.median;
      const auto it = presence_reformed.find(n);
      char ratio[32] = "";
      if (kind != LossKind::kKill && it != presence_reformed.end() && it->second > 0) {
        std::snprintf(ratio, sizeof ratio, "%.0fx", reformed.median / it->second);
      }
      std::printf("| %d | %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %s | %s |\n", n,
                  loss_kind_name(kind), repeats, told.median, told.min, told.max, reformed.median,
                  reformed.min, reformed.max, ratio,
                  counters_cell(HostCounters::read().since(before)).c_str());
      std::fflush(stdout);
    } catch (const std::exception& e) {
      print_failed_row(
          "| " + std::to_string(n) + " | " + loss_kind_name(kind) + " | " + std::to_string(repeats),
          e, failed);
    }
  };
  for (int n : o.nodes) {
    if (n >= 2) row(n, LossKind::kKill, o.loss_repeats, o.last_call_ms);
  }
  for (int n : o.lease_nodes) {
    if (n < 2) continue;
    row(n, LossKind::kKillNoPresence, o.lease_repeats, o.lease_last_call_ms);
    row(n, LossKind::kStop, o.lease_repeats, o.lease_last_call_ms);
  }
}

void print_quiet(const FailureBenchOptions& o, rendezvous::StoreServer& server, bool& failed) {
  std::printf(
      "\n## d. no failure: N agents left alone in a round for %d s (heartbeat 1 s, lease 5 s); "
      "every change reported is a false one\n\n",
      o.quiet_s);
  std::printf(
      "| nodes | agents told a node was lost | agents told the store was lost | keepalive probes "
      "| loopback drops / aborted connections |\n");
  std::printf("| ---: | ---: | ---: | ---: | ---: |\n");
  for (int n : o.quiet_nodes) {
    const auto before = HostCounters::read();
    try {
      const auto r = bench_quiet(server, n, o.quiet_s);
      const auto counters = HostCounters::read().since(before);
      std::printf("| %d | %lld | %lld | %lld | %s |\n", n, static_cast<long long>(r.node_lost),
                  static_cast<long long>(r.store_lost),
                  static_cast<long long>(counters.keepalive_probes),
                  counters_cell(counters).c_str());
      std::fflush(stdout);
    } catch (const std::exception& e) {
      print_failed_row("| " + std::to_string(n), e, failed);
    }
  }
}

}  // namespace

int run_failure_bench(const FailureBenchOptions& options, NodeFactory& factory) {
  // Hundreds of simulated agents' progress lines would drown the tables.
  const ddp::log::ScopedSink quiet([](ddp::log::Level, std::string_view) {});
  try {
    const uint64_t limit = rendezvous::raise_fd_limit(65536);
    rendezvous::StoreServerOptions server_options{"127.0.0.1", 0};
    // Every simulated node connects from 127.0.0.1: no per-address connection limit.
    server_options.limits.max_conns_per_peer = std::numeric_limits<size_t>::max();
    rendezvous::StoreServer server(server_options);
    std::printf("fd limit %llu; store server on %s (%s)\n\n",
                static_cast<unsigned long long>(limit), server.address().c_str(),
                server.io_backend().c_str());
    const auto has = [&](char part) { return options.parts.find(part) != std::string::npos; };
    bool failed = false;
    if (has('a')) print_stop(options, server, failed);
    if (has('b')) print_restart(options, server, failed);
    if (has('c')) print_loss(options, server, factory, failed);
    if (has('d')) print_quiet(options, server, failed);
    return failed ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "failure_bench: %s\n", e.what());
    return 1;
  }
}

}  // namespace ddp::bench
