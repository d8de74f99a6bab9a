#include "targets.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <latch>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "rendezvous/store/etcd/etcd_store.hpp"
#include "rendezvous/store/tcp_store.hpp"

namespace ddp::bench {

using Clock = std::chrono::steady_clock;
using rendezvous::DynamicRendezvous;
using rendezvous::DynamicRendezvousOptions;
using rendezvous::RendezvousInfo;

namespace {

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

DynamicRendezvousOptions base_options(const std::string& run_id, int min_nodes, int max_nodes,
                                      std::chrono::milliseconds lease_timeout) {
  DynamicRendezvousOptions o;
  o.run_id = run_id;
  o.min_nodes = min_nodes;
  o.max_nodes = max_nodes;
  o.local_world_size = 8;
  o.join_timeout = std::chrono::seconds(120);
  o.close_timeout = std::chrono::seconds(60);
  o.last_call_timeout = std::chrono::milliseconds(200);
  o.progress_interval = std::chrono::seconds(30);
  o.lease_timeout = lease_timeout;
  return o;
}

void check_ranks(const std::vector<RendezvousInfo>& infos) {
  std::vector<int> ranks;
  for (const auto& i : infos) ranks.push_back(i.group_rank);
  std::sort(ranks.begin(), ranks.end());
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] != static_cast<int>(i)) throw std::runtime_error("group ranks are not 0..N-1");
  }
}

// The victim: this program again, its stdout a pipe read until "bound".
struct Victim {
  pid_t pid = -1;
  int out = -1;
  explicit Victim(const std::vector<std::string>& argv) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));  // NOLINT
    args.push_back(nullptr);
    pid = ::fork();
    if (pid == 0) {
      ::dup2(fds[1], STDOUT_FILENO);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    out = fds[0];
  }
  void wait_bound() const {
    std::string text;
    char buf[64];
    while (text.find("bound") == std::string::npos) {
      const ssize_t n = ::read(out, buf, sizeof(buf));
      if (n <= 0) throw std::runtime_error("the victim process exited before joining");
      text.append(buf, static_cast<size_t>(n));
    }
  }
  ~Victim() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (out >= 0) ::close(out);
  }
};

}  // namespace

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

Target tcp_target(uint16_t port, std::chrono::milliseconds lease_timeout) {
  Target t;
  t.name = "tcp";
  t.connect = [port]() -> std::shared_ptr<rendezvous::Store> {
    rendezvous::TcpStoreOptions o;
    o.host = "127.0.0.1";
    o.port = port;
    o.timeout = std::chrono::seconds(120);
    o.connect_timeout = std::chrono::seconds(30);
    return std::make_shared<rendezvous::TcpStore>(o);
  };
  t.options = [lease_timeout](const std::string& id, int lo, int hi) {
    return base_options(id, lo, hi, lease_timeout);
  };
  return t;
}

Target etcd_target(const std::string& endpoint, std::chrono::milliseconds lease_timeout) {
  Target t;
  t.name = "etcd";
  t.connect = [endpoint, lease_timeout]() -> std::shared_ptr<rendezvous::Store> {
    rendezvous::EtcdStoreOptions o;
    o.endpoints = {endpoint};
    o.prefix = "/ddplaunch-bench/";
    o.timeout = std::chrono::seconds(120);
    // As the launcher: the lease is lease_timeout in whole seconds.
    o.presence_ttl =
        std::chrono::seconds(std::max<int64_t>(2, (lease_timeout.count() + 999) / 1000));
    return std::make_shared<rendezvous::EtcdStore>(o);
  };
  t.options = [lease_timeout](const std::string& id, int lo, int hi) {
    auto o = base_options(id, lo, hi, lease_timeout);
    o.heartbeats = false;  // the lease is the liveness, as --rdzv_backend etcd-v3 sets it
    return o;
  };
  return t;
}

std::vector<double> agree(const Target& target, int nodes, int repeats) {
  std::vector<double> result;
  const auto n = static_cast<size_t>(nodes);
  std::vector<std::shared_ptr<rendezvous::Store>> stores;
  for (size_t i = 0; i < n; ++i) stores.push_back(target.connect());
  for (int rep = 0; rep < repeats; ++rep) {
    const std::string run_id = target.name + "-agree-" + std::to_string(nodes) + "-" +
                               std::to_string(rep) + "-" + std::to_string(::getpid());
    std::vector<std::unique_ptr<DynamicRendezvous>> handlers;
    for (size_t i = 0; i < n; ++i) {
      auto o = target.options(run_id, nodes, nodes);
      o.watch_membership = false;  // agreement only
      handlers.push_back(std::make_unique<DynamicRendezvous>(o, stores[i], nullptr));
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
    const auto start = Clock::now();
    go.count_down();
    for (auto& t : threads) t.join();
    result.push_back(seconds(Clock::now() - start));
    check_ranks(infos);
  }
  return result;
}

LossResult node_loss(const Target& target, int nodes, int repeats,
                     const std::vector<std::string>& victim_argv) {
  LossResult result;
  const auto n = static_cast<size_t>(nodes) - 1;  // survivors in this process
  for (int rep = 0; rep < repeats; ++rep) {
    const std::string run_id = target.name + "-loss-" + std::to_string(nodes) + "-" +
                               std::to_string(rep) + "-" + std::to_string(::getpid());
    auto argv = victim_argv;
    argv.push_back(run_id);
    Victim victim(argv);
    // The victim arrives first, so round 0 closes with all N at once (a victim late for the
    // last call would make the survivors re-form before the kill).
    {
      const auto store = target.connect();
      const std::string arrived = "/ddp_rdzv/" + run_id + "/r0/arrived";
      while (store->tickets(arrived) < 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    struct Node {
      std::unique_ptr<DynamicRendezvous> rdzv;
      std::mutex mu;
      std::condition_variable cv;
      bool changed = false;
      Clock::time_point notified, done;
    };
    std::vector<std::unique_ptr<Node>> survivors;
    for (size_t i = 0; i < n; ++i) {
      auto node = std::make_unique<Node>();
      auto store = target.connect();
      node->rdzv = std::make_unique<DynamicRendezvous>(target.options(run_id, nodes - 1, nodes),
                                                       store, [store] { return store; });
      survivors.push_back(std::move(node));
    }
    std::vector<RendezvousInfo> infos(n);
    {
      std::vector<std::thread> threads;
      for (size_t i = 0; i < n; ++i) {
        threads.emplace_back([&, i] { infos[i] = survivors[i]->rdzv->next_rendezvous(); });
      }
      for (auto& t : threads) t.join();
    }
    victim.wait_bound();
    std::vector<std::thread> threads;
    for (auto& node : survivors) {
      Node* p = node.get();
      p->rdzv->watch([p](rendezvous::MembershipChange) {
        std::lock_guard<std::mutex> lock(p->mu);
        p->notified = Clock::now();
        p->changed = true;
        p->cv.notify_all();
      });
      threads.emplace_back([p] {
        {
          std::unique_lock<std::mutex> lock(p->mu);
          if (!p->cv.wait_for(lock, std::chrono::seconds(120), [p] { return p->changed; })) {
            throw std::runtime_error("a survivor was never told about the loss");
          }
        }
        p->rdzv->next_rendezvous();
        p->done = Clock::now();
      });
    }
    const auto killed = Clock::now();
    ::kill(victim.pid, SIGKILL);
    for (auto& t : threads) t.join();
    Clock::time_point told = killed, reformed = killed;
    for (auto& node : survivors) {
      told = std::max(told, node->notified);
      reformed = std::max(reformed, node->done);
    }
    result.detect_s.push_back(seconds(told - killed));
    result.reform_s.push_back(seconds(reformed - killed));
    // Leaving joins each node's watcher threads (up to a heartbeat interval): all at once.
    std::vector<std::thread> leaving;
    for (auto& node : survivors) {
      leaving.emplace_back([p = node.get()] {
        p->rdzv->shutdown();
        p->rdzv.reset();
      });
    }
    for (auto& t : leaving) t.join();
  }
  return result;
}

int run_victim(const Target& target, const std::string& run_id, int nodes) {
  auto store = target.connect();
  DynamicRendezvous rdzv(target.options(run_id, nodes - 1, nodes), store,
                         [store] { return store; });
  rdzv.next_rendezvous();  // its presence is bound before this returns
  std::printf("bound\n");
  std::fflush(stdout);
  while (true) ::pause();
}

}  // namespace ddp::bench
