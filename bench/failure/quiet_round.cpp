#include "quiet_round.hpp"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/dynamic_rendezvous.hpp"
#include "sim_store.hpp"

namespace ddp::bench {

QuietResult bench_quiet(rendezvous::StoreServer& server, int nodes, int seconds) {
  const auto n = static_cast<size_t>(nodes);
  const uint16_t port = server.port();
  const std::string run_id = "quiet-" + std::to_string(n);
  std::vector<std::unique_ptr<rendezvous::DynamicRendezvous>> agents;
  for (size_t i = 0; i < n; ++i) {
    agents.push_back(std::make_unique<rendezvous::DynamicRendezvous>(
        elastic_options(run_id, nodes, nodes), connect_store(port),
        [port] { return connect_store(port); }));
  }
  on_threads(n, [&](size_t i) { agents[i]->next_rendezvous(); });
  std::atomic<int64_t> lost{0};
  std::atomic<int64_t> store_lost{0};
  std::atomic<int64_t> waiting{0};
  for (auto& a : agents) {
    a->watch([&](rendezvous::MembershipChange change) {
      switch (change) {
        case rendezvous::MembershipChange::kNodeLost:
          ++lost;
          break;
        case rendezvous::MembershipChange::kStoreLost:
        case rendezvous::MembershipChange::kSteppedDown:
          ++store_lost;
          break;
        case rendezvous::MembershipChange::kNodeWaiting:
          ++waiting;
          break;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  for (auto& a : agents) a->watch([](rendezvous::MembershipChange) {});
  const QuietResult result{lost.load(), store_lost.load(), waiting.load()};
  // Their watcher threads each take up to a heartbeat to stop: stop them all at once.
  on_threads(n, [&](size_t i) { agents[i].reset(); });
  return result;
}

}  // namespace ddp::bench
