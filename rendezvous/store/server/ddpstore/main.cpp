// ddpstore: a standalone rendezvous store server (PyTorch TCPStore protocol, both dialects).
//   ddpstore --port 29400                    # every interface, IPv6 and IPv4
//   ddpstore --host ::1 --port 0             # port 0: the kernel picks; printed on line 1
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <string>

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/secret.hpp"
#include "common/version.hpp"
#include "rendezvous/store/server/ddpstore/store_daemon.hpp"

int main(int argc, char** argv) {
  ddp::log::init("ddpstore");
  ddp::rendezvous::StoreServerOptions options;
  CLI::App app{"ddpstore: a standalone TCP store server for ddplaunch / torchrun rendezvous"};
  app.set_version_flag("--version", std::string("ddpstore ") + ddp::kVersion,
                       "Print the version (ddpstore X.Y.Z) and exit");
  app.add_option("--host,--bind", options.host,
                 "address to listen on: 127.0.0.1, ::1 or [::1], 0.0.0.0 (every IPv4 "
                 "interface), :: (every interface); default: every interface, IPv6 and IPv4 "
                 "(IPv4 only on a machine without IPv6)");
  app.add_option("--port", options.port, "port to listen on (0: any free port, printed first)")
      ->capture_default_str();
  app.add_option("--max-key-bytes", options.max_key_bytes, "longest key accepted")
      ->capture_default_str();
  app.add_option("--max-value-bytes", options.max_value_bytes, "longest value accepted")
      ->capture_default_str();
  app.add_option("--max-keys-per-request", options.max_keys_per_request,
                 "most keys in one CHECK/WAIT/MULTI_GET/MULTI_SET")
      ->capture_default_str();
  // Limits against abuse (docs/security.md ("Limits")): 0 or absent takes DDPLAUNCH_STORE_* or
  // the default.
  app.add_option("--max-conns-per-peer", options.limits.max_conns_per_peer,
                 "most connections open at once from one client address (default 1024, or "
                 "DDPLAUNCH_STORE_MAX_CONNS_PER_PEER)");
  app.add_option("--max-bytes", options.limits.max_bytes,
                 "most bytes of keys, values and ON_CLOSE records held (default 1 GiB, or "
                 "DDPLAUNCH_STORE_MAX_BYTES)");
  app.add_option("--max-keys", options.limits.max_keys,
                 "most keys held (default 1048576, or DDPLAUNCH_STORE_MAX_KEYS)");
  int64_t frame_timeout_ms = 0;
  app.add_option("--frame-timeout-ms", frame_timeout_ms,
                 "ms a connection may hold part of a request before it is closed (default "
                 "30000, or DDPLAUNCH_STORE_FRAME_TIMEOUT_MS)")
      ->check(CLI::NonNegativeNumber);
  std::string io = "auto";
  app.add_option("--io", io,
                 "I/O backend: auto (io_uring where the kernel allows it, else epoll; "
                 "DDPLAUNCH_STORE_IO may choose), epoll or io_uring")
      ->check(CLI::IsMember({"auto", "epoll", "io_uring"}))
      ->capture_default_str();
  std::string secret_file;
  app.add_option("--secret_file,--secret-file", secret_file,
                 "the job secret (a file of mode 0600; default: DDPLAUNCH_SECRET_FILE): native "
                 "clients must prove it, PyTorch clients are confined to the workers' keys "
                 "(docs/security.md)");
  CLI11_PARSE(app, argc, argv);
  options.io = *ddp::rendezvous::parse_store_io(io);
  options.limits.frame_timeout = std::chrono::milliseconds(frame_timeout_ms);
  try {
    if (secret_file.empty()) {
      if (const char* env = std::getenv(ddp::env::kSecretFile)) secret_file = env;
    }
    if (!secret_file.empty()) options.secret = ddp::load_secret_file(secret_file);
    ddp::rendezvous::run_store_daemon(options, std::cout);
  } catch (const ddp::Error& e) {
    DDP_LOG_ERROR(e.what());
    return 1;
  }
  return 0;
}
