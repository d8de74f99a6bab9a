#pragma once
// What the simulated agents of failure_bench share: their store connections, a decorator that
// hides the store's presence support (the lease-only path), per-node arrival times, and the
// statistics printed.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/dynamic_rendezvous.hpp"
#include "rendezvous/store/forwarding_store.hpp"
#include "rendezvous/store/server/fd_limit.hpp"

namespace ddp::bench {

using Clock = std::chrono::steady_clock;

// A new TCP connection to the benchmark's store server on 127.0.0.1:port.
std::shared_ptr<rendezvous::Store> connect_store(uint16_t port);

// A simulated agent's elastic rendezvous settings (--nnodes min:max, 8 workers per node);
// generous join and close timeouts, so only what is measured can be slow.
rendezvous::DynamicRendezvousOptions elastic_options(const std::string& run_id, int min_nodes,
                                                     int max_nodes);

// A simulated agent's connection: forwards everything to base (rendezvous::ForwardingStore)
// and counts the requests (a multi_get of k keys is one; take_ticket and tickets count as the
// add the plain Store makes them). With presence false, open_presence() returns nullptr as a
// PyTorch TCPStore server would: a node using it is only ever found lost by its lease.
class SimStore final : public rendezvous::ForwardingStore {
 public:
  explicit SimStore(std::shared_ptr<rendezvous::Store> base, bool presence = true)
      : ForwardingStore(std::move(base)), presence_(presence) {}

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  using Store::wait;
  void wait(const std::vector<std::string>& keys, rendezvous::Duration timeout) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  void append(const std::string& key, const std::string& value) override;
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::string>& keys,
                 const std::vector<std::string>& values) override;
  int64_t take_ticket(const std::string& key) override { return add(key, 1); }
  int64_t tickets(const std::string& key) override { return add(key, 0); }
  std::unique_ptr<rendezvous::Presence> open_presence() override;

  // Requests so far, and back to zero.
  [[nodiscard]] int64_t requests() const { return requests_.load(); }
  void reset() { requests_ = 0; }

 private:
  bool presence_;
  std::atomic<int64_t> requests_{0};
};

// When each of n simulated nodes reached a point (told of a failure, holding a new round).
class Arrivals {
 public:
  explicit Arrivals(size_t n) : at_(n) {}
  // Records node i's time, once; later calls are ignored. Thread-safe.
  void mark(size_t i);
  // Blocks until node i is marked; throws std::runtime_error naming what after timeout.
  void wait_one(size_t i, std::chrono::seconds timeout, const std::string& what);
  // The latest mark (every node must be marked).
  [[nodiscard]] Clock::time_point last() const;
  [[nodiscard]] Clock::time_point first() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Clock::time_point> at_;
};

struct Summary {
  double median = 0;
  double min = 0;
  double max = 0;
};
// Median, min and max of values (zeros when empty).
Summary summarize(std::vector<double> values);

double millis(Clock::duration d);

// Runs body(i) for i in [0, n) on n threads (a simulated agent each); rethrows the first
// exception once all are joined.
template <typename Body>
void on_threads(size_t n, Body&& body) {
  std::mutex mu;
  std::exception_ptr error;
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      try {
        body(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace ddp::bench
