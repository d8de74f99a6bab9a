#include "sim_store.hpp"

#include <algorithm>
#include <stdexcept>

#include "rendezvous/store/tcp_store.hpp"

namespace ddp::bench {

std::shared_ptr<rendezvous::Store> connect_store(uint16_t port) {
  rendezvous::TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.timeout = std::chrono::seconds(120);
  o.connect_timeout = std::chrono::seconds(30);
  return std::make_shared<rendezvous::TcpStore>(o);
}

rendezvous::DynamicRendezvousOptions elastic_options(const std::string& run_id, int min_nodes,
                                                     int max_nodes) {
  rendezvous::DynamicRendezvousOptions o;
  o.run_id = run_id;
  o.min_nodes = min_nodes;
  o.max_nodes = max_nodes;
  o.local_world_size = 8;
  o.join_timeout = std::chrono::seconds(120);
  o.close_timeout = std::chrono::seconds(60);
  o.progress_interval = std::chrono::seconds(30);
  return o;
}

void SimStore::set(const std::string& key, const std::string& value) {
  ++requests_;
  base().set(key, value);
}

std::string SimStore::get(const std::string& key) {
  ++requests_;
  return base().get(key);
}

int64_t SimStore::add(const std::string& key, int64_t delta) {
  ++requests_;
  return base().add(key, delta);
}

std::string SimStore::compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) {
  ++requests_;
  return base().compare_set(key, expected, desired);
}

bool SimStore::check(const std::vector<std::string>& keys) {
  ++requests_;
  return base().check(keys);
}

void SimStore::wait(const std::vector<std::string>& keys, rendezvous::Duration timeout) {
  ++requests_;
  base().wait(keys, timeout);
}

bool SimStore::delete_key(const std::string& key) {
  ++requests_;
  return base().delete_key(key);
}

int64_t SimStore::num_keys() {
  ++requests_;
  return base().num_keys();
}

void SimStore::append(const std::string& key, const std::string& value) {
  ++requests_;
  base().append(key, value);
}

std::vector<std::string> SimStore::multi_get(const std::vector<std::string>& keys) {
  ++requests_;
  return base().multi_get(keys);
}

void SimStore::multi_set(const std::vector<std::string>& keys,
                         const std::vector<std::string>& values) {
  ++requests_;
  base().multi_set(keys, values);
}

std::unique_ptr<rendezvous::Presence> SimStore::open_presence() {
  return presence_ ? base().open_presence() : nullptr;
}

void Arrivals::mark(size_t i) {
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (at_.at(i) != Clock::time_point{}) return;
  at_[i] = now;
  cv_.notify_all();
}

void Arrivals::wait_one(size_t i, std::chrono::seconds timeout, const std::string& what) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return at_.at(i) != Clock::time_point{}; })) {
    throw std::runtime_error("node " + std::to_string(i) + " was not " + what + " within " +
                             std::to_string(timeout.count()) + " s");
  }
}

Clock::time_point Arrivals::last() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& t : at_) {
    if (t == Clock::time_point{}) throw std::runtime_error("a node was never marked");
  }
  return *std::max_element(at_.begin(), at_.end());
}

Clock::time_point Arrivals::first() const {
  std::lock_guard<std::mutex> lock(mu_);
  return *std::min_element(at_.begin(), at_.end());
}

Summary summarize(std::vector<double> values) {
  if (values.empty()) return {};
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  const double median = n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  return {median, values.front(), values.back()};
}

double millis(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace ddp::bench
