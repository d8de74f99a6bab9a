// failure_bench: a job-wide failure reaching every node, every node restarted after it, a killed
// agent noticed by the survivors, and a round left alone. Prints markdown tables
// (docs/benchmarks.md, "Job-wide failures and node loss").
#include <CLI/CLI.hpp>

#include "failure_bench.hpp"

int main(int argc, char** argv) {
  ddp::bench::FailureBenchOptions o;
  CLI::App app{"Job-wide failures and node loss: simulated agents against one store server"};
  app.add_option("--nodes", o.nodes, "node counts for every part")->delimiter(',');
  app.add_option("--lease_nodes", o.lease_nodes, "node counts for part c's lease rows")
      ->delimiter(',');
  app.add_option("--parts", o.parts,
                 "which parts to run: a (stop), b (restart), c (node loss), d (no failure)");
  app.add_option("--repeats", o.repeats, "repeats of parts a and b (median reported)");
  app.add_option("--loss_repeats", o.loss_repeats, "kills per node count, presence rows");
  app.add_option("--lease_repeats", o.lease_repeats, "kills or stops per node count, lease rows");
  app.add_option("--restart_gap_ms", o.restart_gap_ms,
                 "part b: ms between one restart and the next failure");
  app.add_option("--heartbeat_ms", o.heartbeat_ms, "heartbeat interval (part c)");
  app.add_option("--lease_ms", o.lease_ms, "lease timeout (part c)");
  app.add_option("--last_call_ms", o.last_call_ms, "last-call window, parts b and c (presence)");
  app.add_option("--lease_last_call_ms", o.lease_last_call_ms,
                 "last-call window, part c's lease rows");
  app.add_option("--quiet_nodes", o.quiet_nodes, "node counts for part d")->delimiter(',');
  app.add_option("--quiet_s", o.quiet_s, "seconds part d leaves the agents alone");
  CLI11_PARSE(app, argc, argv);
  // Forked now, while this process has one thread: the killed agents of part c come from it.
  ddp::bench::NodeFactory factory;
  return ddp::bench::run_failure_bench(o, factory);
}
