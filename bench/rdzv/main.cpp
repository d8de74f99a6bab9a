// rdzv_bench: rendezvous time against the number of nodes, and re-form time after a loss.
// Prints markdown tables (docs/benchmarks.md, "Rendezvous at scale").
#include <CLI/CLI.hpp>
#include <cstdio>
#include <vector>

#include "rdzv_bench.hpp"

int main(int argc, char** argv) {
  std::vector<int> agree_nodes{8, 64, 512, 1024, 2048, 4096};
  std::vector<int> reform_nodes{8, 64, 256};
  int repeats = 5;
  int reform_repeats = 3;
  int heartbeat_ms = 1000;
  int lease_ms = 5000;
  int last_call_ms = 200;
  CLI::App app{"Rendezvous at scale: simulated agents against one store server"};
  app.add_option("--nodes", agree_nodes, "node counts for the agreement table")->delimiter(',');
  app.add_option("--repeats", repeats, "rounds per node count (median reported)");
  app.add_option("--reform_nodes", reform_nodes, "node counts for the re-form table (0: skip)")
      ->delimiter(',');
  app.add_option("--reform_repeats", reform_repeats, "losses per node count");
  app.add_option("--heartbeat_ms", heartbeat_ms, "heartbeat interval for the re-form table");
  app.add_option("--lease_ms", lease_ms, "lease timeout for the re-form table");
  app.add_option("--last_call_ms", last_call_ms, "last-call window for the re-form table");
  CLI11_PARSE(app, argc, argv);
  return ddp::bench::run_rdzv_bench(
      {agree_nodes, reform_nodes, repeats, reform_repeats, heartbeat_ms, lease_ms, last_call_ms});
}
