// init_bench: what init_process_group and a store barrier cost N ranks against one TCPStore
// server of PyTorch's 2.2+ dialect (ours or PyTorch's own): rank_script.hpp says what each
// rank sends. Prints a table and one key=value line (scripts/bench/init.sh).
//   init_bench --port 29500 --ranks 16384 [--peers 1] [--window 1024] [--sources 4]
//   init_bench --ranks 256      (no --port: against this build's server, in this process)
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>

#include "common/error.hpp"
#include "init_load.hpp"
#include "init_report.hpp"
#include "rendezvous/store/server/fd_limit.hpp"
#include "rendezvous/store/server/store_server.hpp"

int main(int argc, char** argv) {
  ddp::bench::InitLoadOptions o;
  int poll_ms = 10;
  CLI::App app{"init_bench: N ranks' init_process_group + store barrier against one store"};
  app.add_option("--host", o.host, "server address (IPv4)")->capture_default_str();
  app.add_option("--port", o.port, "server port; none: this build's server, in-process");
  app.add_option("--ranks", o.pattern.ranks, "ranks (one connection each)")->required();
  app.add_option("--peers", o.pattern.peers, "address keys each rank reads (rank 0's first)")
      ->capture_default_str();
  app.add_option("--value-bytes", o.pattern.value_bytes, "size of each address value")
      ->capture_default_str();
  app.add_option("--poll-ms", poll_ms, "rank 0's init counter polling interval")
      ->capture_default_str();
  app.add_option("--window", o.window, "connections being set up at once")->capture_default_str();
  app.add_option("--sources", o.sources, "loopback source addresses 127.0.0.1..N")
      ->capture_default_str();
  app.add_option("--stall-seconds", o.stall_seconds, "fail after this long without a reply")
      ->capture_default_str();
  app.add_option("--server-pid", o.server_pid,
                 "the server's pid: report its CPU time while the ranks ran");
  CLI11_PARSE(app, argc, argv);
  o.pattern.poll_interval = std::chrono::milliseconds(poll_ms);
  const uint64_t limit = ddp::rendezvous::raise_fd_limit();
  try {
    std::unique_ptr<ddp::rendezvous::StoreServer> server;
    if (o.port == 0) {
      ddp::rendezvous::StoreServerOptions s;
      s.host = "0.0.0.0";
      s.limits.max_conns_per_peer = size_t{1} << 20;  // every rank comes from loopback
      server = std::make_unique<ddp::rendezvous::StoreServer>(s);
      o.port = server->port();
    }
    if (static_cast<uint64_t>(o.pattern.ranks) + (server ? o.pattern.ranks : 0) + 64 > limit) {
      std::cerr << "init_bench: " << o.pattern.ranks << " ranks need more descriptors than this "
                << "process may open (" << limit << "; ulimit -Hn)\n";
      return 2;
    }
    const auto summary = ddp::bench::summarize(ddp::bench::run_init_load(o));
    std::printf("%s%s\n", ddp::bench::summary_table(summary).c_str(),
                ddp::bench::summary_line(summary).c_str());
  } catch (const ddp::Error& e) {
    std::cerr << e.what() << std::endl;
    return 1;
  }
  return 0;
}
