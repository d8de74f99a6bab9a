#include "rendezvous/store_server.hpp"

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdio>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/error.hpp"
#include "rendezvous/server_state.hpp"
#include "rendezvous/store_session.hpp"

namespace ddp::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;

struct StoreServer::Impl {
  explicit Impl(StoreServerOptions opts)
      : options(std::move(opts)),
        session_config{
            {options.max_key_bytes, options.max_value_bytes, options.max_keys_per_request},
            options.log_name},
        acceptor(io),
        retry_timer(io) {}

  void listen();
  void do_accept();
  void add_session(tcp::socket socket);
  void stop_all();

  // Declared first so it is destroyed last: pending handlers own sessions.
  asio::io_context io{1};  // one thread runs the loop; other threads only post stop()
  StoreServerOptions options;
  SessionConfig session_config;
  ServerState state;
  tcp::acceptor acceptor;
  asio::steady_timer retry_timer;
  std::unordered_map<StoreSession*, std::shared_ptr<StoreSession>> sessions;
  std::atomic<size_t> num_connections{0};
  uint16_t port = 0;
  uint64_t accept_failures = 0;  // current streak, for one log line per streak
  std::thread thread;
  std::mutex stop_mu;
  bool stopped = false;
};

void StoreServer::Impl::listen() {
  boost::system::error_code ec;
  const std::string where = options.host + ":" + std::to_string(options.port);
  tcp::endpoint endpoint;
  auto address = asio::ip::make_address(options.host, ec);
  if (!ec) {
    endpoint = tcp::endpoint(address, options.port);
  } else {
    tcp::resolver resolver(io);
    auto results =
        resolver.resolve(options.host, std::to_string(options.port), tcp::resolver::passive, ec);
    if (ec || results.empty()) {
      throw StoreError("store server: cannot resolve listen address " + where + ": " +
                       ec.message());
    }
    endpoint = results.begin()->endpoint();
  }
  auto fail = [&](const char* step) {
    throw StoreError(std::string("store server: cannot ") + step + " " + where + ": " +
                     ec.message());
  };
  acceptor.open(endpoint.protocol(), ec);
  if (ec) fail("open a socket for");
  acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (ec) fail("set SO_REUSEADDR on");
  acceptor.bind(endpoint, ec);
  if (ec) fail("bind");
  acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail("listen on");
  // Non-blocking, so the accept loop in do_accept() stops when the queue is empty.
  acceptor.non_blocking(true, ec);
  if (ec) fail("make non-blocking the listener of");
  port = acceptor.local_endpoint().port();
}

void StoreServer::Impl::do_accept() {
  acceptor.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || stopped) return;
    if (ec) {
      // Out of file descriptors or similar: say so once per streak (not every 50 ms), then
      // try again shortly instead of spinning or giving up on every future client.
      if (accept_failures++ == 0) {
        std::string line = options.log_name + ": accept failed on port " + std::to_string(port) +
                           ": " + ec.message() + " (" + std::to_string(num_connections.load()) +
                           " connections open; retrying every 50 ms)\n";
        std::fwrite(line.data(), 1, line.size(), stderr);
      }
      retry_timer.expires_after(std::chrono::milliseconds(50));
      retry_timer.async_wait([this](const boost::system::error_code& tec) {
        if (!tec && !stopped) do_accept();
      });
      return;
    }
    if (accept_failures > 0) {
      std::string line = options.log_name + ": accepting again after " +
                         std::to_string(accept_failures) + " failed attempts\n";
      std::fwrite(line.data(), 1, line.size(), stderr);
      accept_failures = 0;
    }
    add_session(std::move(socket));
    // Drain the rest of the accept queue now: when a thousand agents connect at once, one
    // accept per loop turn would leave the last ones queued behind everyone's requests.
    for (;;) {
      boost::system::error_code aec;
      tcp::socket more(io);
      acceptor.accept(more, aec);
      if (aec) break;  // would_block (queue empty) or a real error the async path reports
      add_session(std::move(more));
    }
    do_accept();
  });
}

void StoreServer::Impl::add_session(tcp::socket socket) {
  auto session = std::make_shared<StoreSession>(std::move(socket), state, session_config,
                                                [this](StoreSession* s) {
                                                  sessions.erase(s);
                                                  --num_connections;
                                                });
  sessions.emplace(session.get(), session);
  ++num_connections;
  session->start();
}

void StoreServer::Impl::stop_all() {
  stopped = true;
  boost::system::error_code ignored;
  acceptor.close(ignored);
  retry_timer.cancel();
  auto all = std::move(sessions);
  sessions.clear();
  for (auto& [ptr, session] : all) session->stop();
  io.stop();
}

StoreServer::StoreServer(StoreServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->listen();
  impl_->do_accept();
  impl_->thread = std::thread([impl = impl_.get()] {
    for (;;) {
      try {
        impl->io.run();
        return;
      } catch (const std::exception& e) {
        // A bug in one handler must not take every client's rendezvous down with it.
        std::string line =
            impl->options.log_name + ": unexpected error in the event loop: " + e.what() + "\n";
        std::fwrite(line.data(), 1, line.size(), stderr);
      }
    }
  });
}

StoreServer::~StoreServer() {
  stop();
}

uint16_t StoreServer::port() const {
  return impl_->port;
}

const std::string& StoreServer::host() const {
  return impl_->options.host;
}

void StoreServer::stop() {
  std::lock_guard<std::mutex> lock(impl_->stop_mu);  // stop() from two threads: one joins
  if (!impl_->thread.joinable()) return;
  asio::post(impl_->io, [impl = impl_.get()] { impl->stop_all(); });
  impl_->thread.join();
}

size_t StoreServer::num_connections() const {
  return impl_->num_connections.load();
}

}  // namespace ddp::rendezvous
