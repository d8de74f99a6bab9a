// store_bench: N connections x M requests (set, get, add) against a TCPStore-protocol
// server; prints requests/s and round-trip p50/p99.
//   store_bench --port 29500 --clients 64 --requests 2000 [--dialect legacy] [--io epoll]
//               [--secret_file F]   (authenticate every connection, as ddplaunch's clients do)
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "common/error.hpp"
#include "common/secret.hpp"
#include "rendezvous/store/server/fd_limit.hpp"
#include "store_load.hpp"

int main(int argc, char** argv) {
  ddp::bench::LoadOptions o;
  std::string dialect = "v2";
  CLI::App app{"store_bench: load a TCPStore-protocol server"};
  app.add_option("--host", o.host, "server address")->capture_default_str();
  app.add_option("--port", o.port, "server port")->required();
  app.add_option("--clients", o.clients, "concurrent connections")->capture_default_str();
  app.add_option("--requests", o.requests_per_client, "requests per connection")
      ->capture_default_str();
  app.add_option("--value-bytes", o.value_bytes, "size of each SET value")->capture_default_str();
  app.add_option("--dialect", dialect, "v2 (PyTorch >= 2.2, ours) or legacy (PyTorch 1.13)")
      ->check(CLI::IsMember({"v2", "legacy"}))
      ->capture_default_str();
  std::string io = "io_uring";
  app.add_option("--io", io, "I/O engine of the load generator: io_uring or epoll")
      ->check(CLI::IsMember({"io_uring", "epoll"}))
      ->capture_default_str();
  std::string secret_file;
  app.add_option("--secret_file", secret_file,
                 "prove this job secret at connect (a ddpstore --secret_file with the same file)");
  CLI11_PARSE(app, argc, argv);
  o.io = io == "io_uring" ? ddp::bench::LoadIo::kIoUring : ddp::bench::LoadIo::kEpoll;
  o.dialect = dialect == "v2" ? ddp::rendezvous::wire::Dialect::kV2
                              : ddp::rendezvous::wire::Dialect::kLegacy;
  ddp::rendezvous::raise_fd_limit();
  try {
    if (!secret_file.empty()) o.secret = ddp::load_secret_file(secret_file);
    const auto r = ddp::bench::run_load(o);
    std::printf(
        "clients=%d auth=%s requests=%llu round_trips=%zu seconds=%.3f req_per_s=%.0f "
        "p50_us=%.1f p99_us=%.1f connect_p50_us=%.1f connect_p99_us=%.1f client_cpu_s=%.3f\n",
        o.clients, o.secret.empty() ? "off" : "on", static_cast<unsigned long long>(r.requests),
        r.round_trip_us.size(), r.seconds, r.requests_per_second(), r.percentile_us(50),
        r.percentile_us(99), r.connect_percentile_us(50), r.connect_percentile_us(99),
        r.cpu_seconds);
  } catch (const ddp::Error& e) {
    std::cerr << e.what() << std::endl;
    return 1;
  }
  return 0;
}
