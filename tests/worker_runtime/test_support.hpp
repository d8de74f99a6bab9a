#pragma once
// Helpers shared by the worker_runtime tests: ranks in threads over one store, Gloo groups,
// thread-safe assertions. Child processes, temp dirs and files: tests/support (ddp::test).
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/fd.hpp"
#include "common/recovery_protocol.hpp"
#include "rendezvous/store/store.hpp"
#include "worker_runtime/gloo_process_group.hpp"

namespace ddp::worker_runtime::test {

// Runs fn(rank) on `world` threads; rethrows the first exception after all joined.
void run_ranks(int world, const std::function<void(int rank)>& fn);

// Catch2 v2 assertions are not thread-safe: rank threads wrap them in RT_LOCKED(...).
// Never put a collective inside: the other ranks could not join it while the lock is held.
std::mutex& catch_mutex();
#define RT_LOCKED(...)                                                                \
  do {                                                                                \
    std::lock_guard<std::mutex> rt_lock_(::ddp::worker_runtime::test::catch_mutex()); \
    __VA_ARGS__;                                                                      \
  } while (false)

// A Gloo group (rank of world) over store on 127.0.0.1, with a 20 s collective timeout.
std::unique_ptr<GlooProcessGroup> make_group(
    std::shared_ptr<rendezvous::Store> store, int rank, int world,
    rendezvous::Duration connect_timeout = std::chrono::seconds(20),
    size_t direct_max_bytes = 4 << 20);

// Runs fn; returns the what() of the exception it threw, or "" when it returned.
std::string error_of(const std::function<void()>& fn);

// The agent's end of an in-place recovery channel (common/recovery_protocol.hpp), for tests
// that play the agent: whole lines out, parsed lines in.
struct AgentChannel {
  ddp::Fd fd;           // the agent's end
  std::string pending;  // bytes read past the last line
  // Rounds the worker said it built its group in ("built" lines, which read() passes over:
  // they come whenever the group is ready, between the lines a test waits for).
  std::vector<int64_t> built;

  // A socketpair: this end, and the worker's end in worker_end (close-on-exec set; clear it
  // just before starting a child that should inherit it).
  static AgentChannel make(ddp::Fd& worker_end);
  void send(const recovery::Message& message) const;
  void send_raw(const std::string& bytes) const;
  // The next line other than "built", parsed; throws std::runtime_error when none comes within
  // timeout, the worker closed its end, or the line is bad.
  recovery::Message read(std::chrono::milliseconds timeout = std::chrono::seconds(30));
};

}  // namespace ddp::worker_runtime::test
