#pragma once
// The part of store_bench every I/O engine shares: the connected clients, the frame each
// sends next, checking each reply and timing each round trip. An engine only moves bytes:
// it sends what next() returns and hands whatever arrives to received().
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "store_load.hpp"

namespace ddp::bench {

class ClosedLoop {
 public:
  // Connects every client (blocking sockets, TCP_NODELAY) and makes one untimed round trip
  // on each, so the clock starts only once the server has accepted them all.
  explicit ClosedLoop(const LoadOptions& options);
  ~ClosedLoop();
  ClosedLoop(const ClosedLoop&) = delete;
  ClosedLoop& operator=(const ClosedLoop&) = delete;

  [[nodiscard]] size_t size() const { return clients_.size(); }
  [[nodiscard]] int fd(size_t i) const { return clients_[i].fd; }
  // Starts the clock.
  void start();
  // Client i's next request (and the round trip's start time), or empty once it is done.
  std::string_view next(size_t i);
  // Bytes of client i's reply; true once the reply is complete (its latency is recorded).
  // Throws StoreError on bytes nobody asked for or a reply of the wrong size.
  bool received(size_t i, std::string_view bytes);
  [[nodiscard]] bool done() const { return finished_ == clients_.size(); }
  // Stops the clock and gathers every round trip.
  LoadResult finish();

 private:
  struct Client {
    int fd = -1;
    std::string set_get;  // SET k v + GET k: one reply (the value)
    std::string add;      // ADD counter 1: one reply (the new count)
    std::string in;       // the reply so far
    size_t expected = 0;  // bytes of the reply to the request in flight (0: none)
    bool set_get_next = true;
    int sent = 0;  // requests sent
    std::chrono::steady_clock::time_point started;
    std::vector<double> samples;
  };

  const LoadOptions options_;
  std::vector<Client> clients_;
  size_t finished_ = 0;
  uint64_t requests_ = 0;
  std::vector<double> connect_us_;  // per client: connect() to its warm-up reply
  std::chrono::steady_clock::time_point start_;
  double cpu_start_ = 0;
};

[[noreturn]] void fail_client(size_t id, const std::string& what);
// Blocking send of every byte on client id's socket (fail_client on an error).
void send_all(int fd, std::string_view bytes, size_t id);

// The engines (load_epoll.cpp, load_uring.cpp): drive loop until done().
void run_epoll(ClosedLoop& loop);
void run_uring(ClosedLoop& loop);

}  // namespace ddp::bench
