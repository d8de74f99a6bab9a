#include "rendezvous/store/server/ddpstore/store_daemon.hpp"

#include <pthread.h>

#include <csignal>
#include <ostream>

#include "common/error.hpp"
#include "common/log.hpp"
#include "rendezvous/store/server/fd_limit.hpp"

namespace ddp::rendezvous {

void run_store_daemon(const StoreServerOptions& options, std::ostream& out) {
  raise_fd_limit();
  // SIGINT/SIGTERM are blocked before the server thread starts (it inherits the mask) and
  // taken synchronously with sigwait: a signal that arrives early stays pending, none is
  // lost, and no handler runs in the middle of the server's work.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  if (int rc = pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr); rc != 0) {
    throw Error("ddpstore: cannot block SIGINT/SIGTERM: " + errno_text(rc));
  }
  StoreServer server(options);
  out << server.port() << std::endl;
  DDP_LOG_INFO("serving on " + server.address() + " with " + server.io_backend() +
               (server.requires_auth() ? " (job secret required)" : ""));
  const ServerLimits& limits = server.limits();
  DDP_LOG_INFO("limits: " + std::to_string(limits.max_conns_per_peer) +
               " connections per client address, " + std::to_string(limits.max_bytes) + " bytes, " +
               std::to_string(limits.max_keys) + " keys, " +
               std::to_string(limits.frame_timeout.count()) + " ms for the rest of a request");
  int received = 0;
  while (sigwait(&stop_signals, &received) != 0) {
  }
  DDP_LOG_INFO(std::string(received == SIGINT ? "SIGINT" : "SIGTERM") + ", stopping (" +
               std::to_string(server.num_connections()) + " connections open)");
  server.stop();
}

}  // namespace ddp::rendezvous
