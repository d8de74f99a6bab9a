// rdzv_etcd_bench: the elastic rendezvous on etcd v3 against our TCP store, same run.
// Prints markdown tables (docs/benchmarks.md, "Rendezvous on etcd"). The etcd member is
// started by the caller (scripts/bench/rdzv_etcd.sh).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

#include "../rdzv/server_process.hpp"
#include "common/log.hpp"
#include "rendezvous/store/server/fd_limit.hpp"
#include "targets.hpp"

int main(int argc, char** argv) {
  std::string etcd = "127.0.0.1:2379";
  std::vector<int> agree_nodes{8, 64, 256, 1024};
  std::vector<int> loss_nodes{8, 64};
  int repeats = 3;
  int loss_repeats = 3;
  int lease_ms = 5000;  // the launcher's default lease_timeout
  std::string victim_target;
  int victim_nodes = 0;
  std::string victim_run_id;
  CLI::App app{"Rendezvous on etcd v3 vs the TCP store"};
  app.add_option("--etcd", etcd, "an etcd member's host:port");
  app.add_option("--nodes", agree_nodes, "node counts for the agreement table")->delimiter(',');
  app.add_option("--loss_nodes", loss_nodes, "node counts for the node-loss table")->delimiter(',');
  app.add_option("--repeats", repeats, "rounds per node count (median reported)");
  app.add_option("--loss_repeats", loss_repeats, "losses per node count");
  app.add_option("--lease_ms", lease_ms, "lease_timeout (etcd: the lease TTL, whole seconds)");
  app.add_option("--victim", victim_target, "internal: be the victim on tcp:PORT or etcd");
  app.add_option("--victim_nodes", victim_nodes, "internal");
  app.add_option("victim_run_id", victim_run_id, "internal");
  CLI11_PARSE(app, argc, argv);
  // Thousands of agents' progress lines would drown the tables (RDZV_BENCH_LOG=1 keeps them).
  std::optional<ddp::log::ScopedSink> quiet;
  if (std::getenv("RDZV_BENCH_LOG") == nullptr) {
    quiet.emplace([](ddp::log::Level, std::string_view) {});
  }
  const auto lease = std::chrono::milliseconds(lease_ms);
  try {
    if (!victim_target.empty()) {
      const auto target =
          victim_target == "etcd"
              ? ddp::bench::etcd_target(etcd, lease)
              : ddp::bench::tcp_target(static_cast<uint16_t>(std::stoi(victim_target.substr(4))),
                                       lease);
      return ddp::bench::run_victim(target, victim_run_id, victim_nodes);
    }
    ddp::rendezvous::raise_fd_limit(20000);
    const ddp::bench::ServerProcess server;  // forked while this process has one thread
    const auto tcp = ddp::bench::tcp_target(server.port(), lease);
    const auto on_etcd = ddp::bench::etcd_target(etcd, lease);
    std::printf("| nodes | TCP store median (s) | etcd median (s) | etcd / TCP |\n");
    std::printf("| ---: | ---: | ---: | ---: |\n");
    for (int n : agree_nodes) {
      const double t = ddp::bench::median(ddp::bench::agree(tcp, n, repeats));
      const double e = ddp::bench::median(ddp::bench::agree(on_etcd, n, repeats));
      std::printf("| %d | %.3f | %.3f | %.1fx |\n", n, t, e, e / t);
      std::fflush(stdout);
    }
    std::printf(
        "\nnode loss: one agent (a child process) SIGKILLed; lease_timeout %d ms (TCP: "
        "heartbeats + connection-bound presence; etcd: a lease of %lld s, no heartbeats)\n\n",
        lease_ms, static_cast<long long>(std::max(2, (lease_ms + 999) / 1000)));
    std::printf(
        "| nodes | store | all survivors told (s, median) | re-formed (s, median) | max "
        "re-formed (s) |\n");
    std::printf("| ---: | --- | ---: | ---: | ---: |\n");
    for (int n : loss_nodes) {
      if (n < 2) continue;
      for (const auto* target : {&tcp, &on_etcd}) {
        std::vector<std::string> victim = {
            argv[0],          "--etcd",          etcd,      "--lease_ms", std::to_string(lease_ms),
            "--victim_nodes", std::to_string(n), "--victim"};
        victim.push_back(target->name == "etcd" ? "etcd" : "tcp:" + std::to_string(server.port()));
        const auto r = ddp::bench::node_loss(*target, n, loss_repeats, victim);
        std::printf("| %d | %s | %.2f | %.2f | %.2f |\n", n, target->name.c_str(),
                    ddp::bench::median(r.detect_s), ddp::bench::median(r.reform_s),
                    *std::max_element(r.reform_s.begin(), r.reform_s.end()));
        std::fflush(stdout);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdzv_etcd_bench: %s\n", e.what());
    return 1;
  }
}
