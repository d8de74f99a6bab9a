#include "test_support.hpp"

#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace ddp::worker_runtime::test {

void run_ranks(int world, const std::function<void(int rank)>& fn) {
  std::vector<std::thread> threads;
  std::mutex mu;
  std::exception_ptr first;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!first) {
          first = std::current_exception();
        }
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  if (first) {
    std::rethrow_exception(first);
  }
}

std::mutex& catch_mutex() {
  static std::mutex mu;
  return mu;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::unique_ptr<GlooProcessGroup> make_group(std::shared_ptr<rendezvous::Store> store, int rank,
                                             int world, rendezvous::Duration connect_timeout,
                                             size_t direct_max_bytes) {
  GlooOptions o;
  o.rank = rank;
  o.size = world;
  o.timeout = std::chrono::seconds(20);
  o.connect_timeout = connect_timeout;
  o.bind_addr = "127.0.0.1";
  o.direct_max_bytes = direct_max_bytes;
  return std::make_unique<GlooProcessGroup>(std::move(store), o);
}

}  // namespace ddp::worker_runtime::test
