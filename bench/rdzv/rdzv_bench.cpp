#include "rdzv_bench.hpp"

#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <latch>
#include <memory>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>

#include "bench/common/process_cpu.hpp"
#include "common/log.hpp"
#include "counting_store.hpp"
#include "rendezvous/dynamic_rendezvous.hpp"
#include "rendezvous/store/server/fd_limit.hpp"
#include "rendezvous/store/tcp_store.hpp"
#include "server_process.hpp"

namespace ddp::bench {

using Clock = std::chrono::steady_clock;
using rendezvous::DynamicRendezvous;
using rendezvous::DynamicRendezvousOptions;
using rendezvous::RendezvousInfo;

namespace {

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Thread stacks of the simulated agents: a round needs a few KiB; glibc's default (8 MiB,
// from RLIMIT_STACK) times 16k threads would reserve 128 GiB of address space.
constexpr size_t kAgentStackBytes = 256 * 1024;

// one_connection: waits share the client's one connection (the agreement table's agents
// are single-threaded), so 16k agents need 16k descriptors on each side, not 32k.
std::shared_ptr<rendezvous::Store> connect(uint16_t port, bool one_connection = false) {
  rendezvous::TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.timeout = std::chrono::seconds(120);
  o.connect_timeout = std::chrono::seconds(30);
  o.one_connection = one_connection;
  return std::make_shared<rendezvous::TcpStore>(o);
}

// std::thread takes the process-wide default attributes (glibc), so this shrinks every
// agent thread's stack.
void set_default_stack_size(size_t bytes) {
  pthread_attr_t attr;
  if (::pthread_attr_init(&attr) != 0) return;
  if (::pthread_attr_setstacksize(&attr, bytes) == 0) ::pthread_setattr_default_np(&attr);
  ::pthread_attr_destroy(&attr);
}

DynamicRendezvousOptions node_options(const std::string& run_id, int min_nodes, int max_nodes) {
  DynamicRendezvousOptions o;
  o.run_id = run_id;
  o.min_nodes = min_nodes;
  o.max_nodes = max_nodes;
  o.local_world_size = 8;
  o.join_timeout = std::chrono::seconds(120);
  o.close_timeout = std::chrono::seconds(60);
  o.progress_interval = std::chrono::seconds(30);
  return o;
}

// Every group rank exactly once, or the benchmark measured something wrong.
void check_ranks(const std::vector<RendezvousInfo>& infos, size_t expected) {
  std::vector<int> ranks;
  for (const auto& i : infos) ranks.push_back(i.group_rank);
  std::sort(ranks.begin(), ranks.end());
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks.size() != expected || ranks[i] != static_cast<int>(i)) {
      throw std::runtime_error("rdzv_bench: group ranks are not 0..N-1");
    }
  }
}

// Reads the phases of one round off the nodes' operation timelines (rdzv_bench.hpp).
AgreePhases phases_of(const std::vector<std::shared_ptr<CountingStore>>& stores,
                      Clock::time_point start) {
  AgreePhases p;
  auto at = [start](Clock::time_point t) { return seconds(t - start); };
  auto later = [](double& slot, double t) { slot = std::max(slot, t); };
  for (const auto& s : stores) {
    const auto& ops = s->timeline();
    if (ops.size() < 2) continue;
    later(p.all_started, at(ops.front().start));
    later(p.last_arrival, at(ops[1].end));  // current_round, then arrived
    later(p.all_done, at(ops.back().end));
    for (size_t i = 0; i < ops.size(); ++i) {
      const std::string_view name = ops[i].name;
      if (name == "multi_get") {
        p.records_ready = at(ops[i].start);
        p.records_read = at(ops[i].end);
      } else if (name == "multi_set") {
        p.assigned = at(ops[i].start);
        p.published = at(ops[i].end);
      } else if (name == "wait" && i + 1 == ops.size() - 1) {
        later(p.all_woken, at(ops[i].end));  // the wait for "closed", before the last read
      }
    }
  }
  return p;
}

}  // namespace

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

AgreeResult bench_agree(const ServerProcess& server, int nodes, int repeats) {
  AgreeResult result;
  result.nodes = nodes;
  const auto n = static_cast<size_t>(nodes);
  auto t0 = Clock::now();
  std::vector<std::shared_ptr<CountingStore>> stores;
  for (size_t i = 0; i < n; ++i)
    stores.push_back(
        std::make_shared<CountingStore>(connect(server.port(), /*one_connection=*/true)));
  result.connect_s = seconds(Clock::now() - t0);

  for (int rep = 0; rep < repeats; ++rep) {
    const std::string run_id = "agree-" + std::to_string(nodes) + "-" + std::to_string(rep);
    std::vector<std::unique_ptr<DynamicRendezvous>> handlers;
    for (size_t i = 0; i < n; ++i) {
      auto o = node_options(run_id, nodes, nodes);
      o.watch_membership = false;  // agreement only; no heartbeats
      handlers.push_back(std::make_unique<DynamicRendezvous>(o, stores[i], nullptr));
      stores[i]->reset();
    }
    std::vector<RendezvousInfo> infos(n);
    std::latch ready(nodes + 1);
    std::latch go(1);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        ready.count_down();
        go.wait();
        infos[i] = handlers[i]->next_rendezvous();
      });
    }
    ready.arrive_and_wait();
    const double server_cpu = server.cpu_seconds();
    const double agents_cpu = process_cpu_seconds();
    const auto start = Clock::now();
    go.count_down();
    for (auto& t : threads) t.join();
    result.agree_s.push_back(seconds(Clock::now() - start));
    result.server_cpu_s.push_back(server.cpu_seconds() - server_cpu);
    result.agents_cpu_s.push_back(process_cpu_seconds() - agents_cpu);
    check_ranks(infos, n);
    result.phases.push_back(phases_of(stores, start));
    int64_t total = 0;
    for (const auto& s : stores) {
      total += s->ops();
      result.ops_per_node_max = std::max(result.ops_per_node_max, s->ops());
    }
    result.ops_per_node_mean = static_cast<double>(total) / static_cast<double>(n);
  }
  return result;
}

namespace {

struct SimNode {
  std::unique_ptr<DynamicRendezvous> rdzv;
  std::mutex mu;
  std::condition_variable cv;
  bool changed = false;
  Clock::time_point notified;
  Clock::time_point done;
};

}  // namespace

ReformResult bench_reform(uint16_t port, const ReformOptions& options) {
  ReformResult result;
  result.nodes = options.nodes;
  const auto n = static_cast<size_t>(options.nodes);
  for (int rep = 0; rep < options.repeats; ++rep) {
    const std::string run_id = "reform-" + std::to_string(n) + "-" + std::to_string(rep);
    std::vector<std::unique_ptr<SimNode>> nodes;
    for (size_t i = 0; i < n; ++i) {
      auto o = node_options(run_id, options.nodes - 1, options.nodes);
      o.heartbeat_interval = options.heartbeat_interval;
      o.lease_timeout = options.lease_timeout;
      o.last_call_timeout = options.last_call_timeout;
      auto node = std::make_unique<SimNode>();
      node->rdzv =
          std::make_unique<DynamicRendezvous>(o, connect(port), [port] { return connect(port); });
      nodes.push_back(std::move(node));
    }
    // Round 0 with everybody.
    std::vector<RendezvousInfo> infos(n);
    {
      std::vector<std::thread> threads;
      for (size_t i = 0; i < n; ++i) {
        threads.emplace_back([&, i] { infos[i] = nodes[i]->rdzv->next_rendezvous(); });
      }
      for (auto& t : threads) t.join();
    }
    check_ranks(infos, n);
    const size_t victim = n / 2;
    std::vector<std::thread> survivors;
    std::vector<RendezvousInfo> after(n);
    for (size_t i = 0; i < n; ++i) {
      if (i == victim) continue;
      SimNode* node = nodes[i].get();
      node->rdzv->watch([node](rendezvous::MembershipChange) {
        std::lock_guard<std::mutex> lock(node->mu);
        node->notified = Clock::now();
        node->changed = true;
        node->cv.notify_all();
      });
      survivors.emplace_back([&, node, i] {
        {
          std::unique_lock<std::mutex> lock(node->mu);
          if (!node->cv.wait_for(lock, std::chrono::seconds(120), [&] { return node->changed; })) {
            throw std::runtime_error("rdzv_bench: a survivor was never told about the loss");
          }
        }
        after[i] = node->rdzv->next_rendezvous();
        node->done = Clock::now();
      });
    }
    const auto killed = Clock::now();
    nodes[victim]->rdzv.reset();  // no shutdown: its heartbeats just stop
    for (auto& t : survivors) t.join();
    Clock::time_point last_notice = killed, last_done = killed;
    std::vector<RendezvousInfo> reformed;
    for (size_t i = 0; i < n; ++i) {
      if (i == victim) continue;
      last_notice = std::max(last_notice, nodes[i]->notified);
      last_done = std::max(last_done, nodes[i]->done);
      reformed.push_back(after[i]);
    }
    check_ranks(reformed, n - 1);
    result.detect_s.push_back(seconds(last_notice - killed));
    result.reform_s.push_back(seconds(last_done - killed));
  }
  return result;
}

int run_rdzv_bench(const BenchOptions& options) {
  // Thousands of simulated agents' progress lines ("round 3: 17/4096 nodes joined") would
  // drown the tables and slow the rounds down.
  const ddp::log::ScopedSink quiet([](ddp::log::Level, std::string_view) {});
  try {
    int most = 0;
    for (int n : options.agree_nodes) most = std::max(most, n);
    for (int n : options.reform_nodes) most = std::max(most, 6 * n);  // main, control, 2+2 watcher
    // One descriptor per connection in this process (the clients) and one in the server's.
    const uint64_t limit = rendezvous::raise_fd_limit(static_cast<uint64_t>(most) + 256);
    std::printf("fd limit %llu per process (agents; the store server in a child process)\n\n",
                static_cast<unsigned long long>(limit));
    const ServerProcess server;  // forked while this process has one thread
    set_default_stack_size(kAgentStackBytes);

    std::printf(
        "| nodes | agree median (s) | min | max | connect all (s) | store requests per node (mean "
        "/ closer) |\n");
    std::printf("| ---: | ---: | ---: | ---: | ---: | ---: |\n");
    std::vector<AgreeResult> agreed;
    for (int n : options.agree_nodes) {
      const auto& r = agreed.emplace_back(bench_agree(server, n, options.repeats));
      std::printf("| %d | %.3f | %.3f | %.3f | %.2f | %.1f / %lld |\n", n, median(r.agree_s),
                  *std::min_element(r.agree_s.begin(), r.agree_s.end()),
                  *std::max_element(r.agree_s.begin(), r.agree_s.end()), r.connect_s,
                  r.ops_per_node_mean, static_cast<long long>(r.ops_per_node_max));
      std::fflush(stdout);
    }
    std::printf(
        "\nwhere the time goes (the median repeat; seconds from the start until: every node "
        "sent its first request / the last arrived / the closer saw every record, read them, "
        "assigned ranks, published / every node woke / every node done; CPU seconds the round "
        "took in the store server's process and in the agents')\n\n");
    std::printf(
        "| nodes | started | last arrival | records seen | read | assigned | published | "
        "woken | done | server CPU | agents CPU |\n");
    std::printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (const auto& r : agreed) {
      // The repeat whose time is nearest the median.
      const double m = median(r.agree_s);
      size_t k = 0;
      for (size_t i = 1; i < r.agree_s.size(); ++i) {
        if (std::abs(r.agree_s[i] - m) < std::abs(r.agree_s[k] - m)) k = i;
      }
      const AgreePhases& p = r.phases[k];
      std::printf("| %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f |\n",
                  r.nodes, p.all_started, p.last_arrival, p.records_ready, p.records_read,
                  p.assigned, p.published, p.all_woken, p.all_done, r.server_cpu_s[k],
                  r.agents_cpu_s[k]);
    }
    std::fflush(stdout);
    if (options.reform_nodes.empty() || options.reform_nodes.front() == 0) return 0;
    std::printf(
        "\nre-form after one node is killed: heartbeat %d ms, lease %d ms, last call %d ms\n\n",
        options.heartbeat_ms, options.lease_ms, options.last_call_ms);
    std::printf(
        "| nodes | all survivors told (s, median) | re-formed (s, median) | max re-formed (s) |\n");
    std::printf("| ---: | ---: | ---: | ---: |\n");
    for (int n : options.reform_nodes) {
      ReformOptions ro;
      ro.nodes = n;
      ro.repeats = options.reform_repeats;
      ro.heartbeat_interval = std::chrono::milliseconds(options.heartbeat_ms);
      ro.lease_timeout = std::chrono::milliseconds(options.lease_ms);
      ro.last_call_timeout = std::chrono::milliseconds(options.last_call_ms);
      const auto r = bench_reform(server.port(), ro);
      std::printf("| %d | %.2f | %.2f | %.2f |\n", n, median(r.detect_s), median(r.reform_s),
                  *std::max_element(r.reform_s.begin(), r.reform_s.end()));
      std::fflush(stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdzv_bench: %s\n", e.what());
    return 1;
  }
}

}  // namespace ddp::bench
