#include "launcher/rendezvous_factory.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>

#include "common/error.hpp"
#include "launcher/local_rendezvous.hpp"

namespace ddp::launcher {
namespace {

constexpr int kDefaultMasterPort = 29500;
constexpr const char* kDefaultMasterAddr = "127.0.0.1";

// torchrun gives a standalone job a random run id so two jobs never share store keys.
std::string random_run_id() {
  std::random_device device;
  std::mt19937_64 gen(device());
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(gen()));
  return buf;
}

// Only for the no-agent-store mode, where worker rank 0 binds the port itself: asks the
// kernel for a free port. (The agent-store mode never does this; it keeps the socket bound.)
uint16_t pick_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw StoreError("socket() for a free port failed: " + errno_text(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  uint16_t port = 0;
  // NOLINTNEXTLINE: the sockets API takes sockaddr*.
  auto* raw = reinterpret_cast<sockaddr*>(&addr);
  if (::bind(fd, raw, sizeof(addr)) == 0 && ::getsockname(fd, raw, &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  int err = errno;
  ::close(fd);
  if (port == 0) throw StoreError("could not find a free port on 127.0.0.1: " + errno_text(err));
  return port;
}

}  // namespace

RendezvousSetup make_rendezvous(const LaunchConfig& config, const Environment& /*env*/) {
  if (config.max_nodes > 1) {
    throw ConfigError("--nnodes=" + config.nnodes.value_or("?") +
                      ": multi-node rendezvous is not available in this build");
  }
  RendezvousSetup setup;
  setup.run_id = config.run_id.value_or(config.standalone ? random_run_id() : "none");

  LocalRendezvousOptions local;
  local.run_id = setup.run_id;
  local.nproc_per_node = config.nproc_per_node;
  local.master_addr = config.master_addr.value_or(kDefaultMasterAddr);
  int port = config.standalone ? 0 : config.master_port.value_or(kDefaultMasterPort);

  if (config.agent_store) {
    rendezvous::StoreServerOptions server;
    // A single-node job only needs loopback unless the user named another address.
    server.host = (local.master_addr == "127.0.0.1" || local.master_addr == "localhost")
                      ? "127.0.0.1"
                      : "0.0.0.0";
    server.port = static_cast<uint16_t>(port);
    setup.store_server = std::make_unique<rendezvous::StoreServer>(server);
    local.master_port = setup.store_server->port();
    setup.workers_use_agent_store = true;
  } else {
    local.master_port = port == 0 ? pick_free_port() : static_cast<uint16_t>(port);
  }
  setup.handler = std::make_unique<LocalRendezvous>(local);
  return setup;
}

}  // namespace ddp::launcher
