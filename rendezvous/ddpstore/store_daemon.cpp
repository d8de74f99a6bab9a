#include "rendezvous/ddpstore/store_daemon.hpp"

// GCC's -Wnull-dereference fires inside Asio's scheduler once inlined (system-header false
// positive the SYSTEM include cannot silence); scoped to this file.
#pragma GCC diagnostic ignored "-Wnull-dereference"

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <csignal>
#include <iostream>

#include "rendezvous/fd_limit.hpp"

namespace ddp::rendezvous {

void run_store_daemon(const StoreServerOptions& options, std::ostream& out) {
  raise_fd_limit();
  // Signals are taken before the server starts so an early SIGTERM is not lost.
  boost::asio::io_context signals_io;
  boost::asio::signal_set signals(signals_io, SIGINT, SIGTERM);
  int received = 0;
  signals.async_wait([&](const boost::system::error_code& ec, int signo) {
    if (!ec) received = signo;
  });
  StoreServer server(options);
  out << server.port() << std::endl;
  std::cerr << "ddpstore: serving on " << options.host << ":" << server.port() << std::endl;
  signals_io.run();
  std::cerr << "ddpstore: " << (received == SIGINT ? "SIGINT" : "SIGTERM") << ", stopping ("
            << server.num_connections() << " connections open)" << std::endl;
  server.stop();
}

}  // namespace ddp::rendezvous
