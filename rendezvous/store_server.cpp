#include "rendezvous/store_server.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/error.hpp"
#include "rendezvous/connection_poller.hpp"
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
        retry_timer(io),
        poller(io, [this] { closed.clear(); }) {}

  void listen();
  void do_accept();
  // Accepts every queued connection; false when accept failed for another reason than an
  // empty queue (out of descriptors...), after logging it once per streak.
  bool accept_all();
  void add_session(int fd, const sockaddr_storage& address, socklen_t length);
  void stop_all();

  // Declared first so it is destroyed last: the acceptor, the timer and the poller are its.
  asio::io_context io{1};  // one thread runs the loop; other threads only post stop()
  StoreServerOptions options;
  SessionConfig session_config;
  ServerState state;
  tcp::acceptor acceptor;
  asio::steady_timer retry_timer;
  ConnectionPoller poller;
  std::vector<char> read_buffer = std::vector<char>(size_t{64} * 1024);  // sessions share it
  std::unordered_map<StoreSession*, std::shared_ptr<StoreSession>> sessions;
  // Sessions closed during the poller's current batch: later events of the batch may still
  // name them, so they are released after it.
  std::vector<std::shared_ptr<StoreSession>> closed;
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
  // Non-blocking, so accept_all() stops when the queue is empty.
  acceptor.non_blocking(true, ec);
  if (ec) fail("make non-blocking the listener of");
  port = acceptor.local_endpoint().port();
}

void StoreServer::Impl::do_accept() {
  acceptor.async_wait(tcp::acceptor::wait_read, [this](const boost::system::error_code& ec) {
    if (ec == asio::error::operation_aborted || stopped) return;
    if (ec || !accept_all()) {
      // Out of file descriptors or similar: try again shortly instead of spinning or giving
      // up on every future client.
      retry_timer.expires_after(std::chrono::milliseconds(50));
      retry_timer.async_wait([this](const boost::system::error_code& tec) {
        if (!tec && !stopped) do_accept();
      });
      return;
    }
    do_accept();
  });
}

bool StoreServer::Impl::accept_all() {
  // Drain the whole accept queue: when a thousand agents connect at once, one accept per
  // loop turn would leave the last ones queued behind everyone's requests.
  for (;;) {
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    const int fd = ::accept4(acceptor.native_handle(), reinterpret_cast<sockaddr*>(&address),
                             &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      if (accept_failures > 0) {
        std::string line = options.log_name + ": accepting again after " +
                           std::to_string(accept_failures) + " failed attempts\n";
        std::fwrite(line.data(), 1, line.size(), stderr);
        accept_failures = 0;
      }
      add_session(fd, address, length);
      continue;
    }
    const int err = errno;
    if (err == EAGAIN || err == EWOULDBLOCK) return true;
    if (err == EINTR || err == ECONNABORTED) continue;  // that client gave up; next one
    if (accept_failures++ == 0) {
      std::string line = options.log_name + ": accept failed on port " + std::to_string(port) +
                         ": " + errno_text(err) + " (" + std::to_string(num_connections.load()) +
                         " connections open; retrying every 50 ms)\n";
      std::fwrite(line.data(), 1, line.size(), stderr);
    }
    return false;
  }
}

void StoreServer::Impl::add_session(int fd, const sockaddr_storage& address, socklen_t length) {
  tcp::endpoint endpoint;
  std::string peer = "unknown peer";
  if (length <= endpoint.capacity()) {
    std::memcpy(endpoint.data(), &address, length);
    endpoint.resize(length);
    peer = endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  auto session = std::make_shared<StoreSession>(fd, std::move(peer), poller, state, session_config,
                                                read_buffer, [this](StoreSession* s) {
                                                  auto it = sessions.find(s);
                                                  if (it == sessions.end()) return;
                                                  closed.push_back(std::move(it->second));
                                                  sessions.erase(it);
                                                  --num_connections;
                                                });
  try {
    session->start();
  } catch (const Error& e) {
    std::string line =
        options.log_name + ": dropping connection from " + session->peer() + ": " + e.what() + "\n";
    std::fwrite(line.data(), 1, line.size(), stderr);
    return;  // the session's destructor closes the socket
  }
  sessions.emplace(session.get(), std::move(session));
  ++num_connections;
}

void StoreServer::Impl::stop_all() {
  stopped = true;
  boost::system::error_code ignored;
  acceptor.close(ignored);
  retry_timer.cancel();
  auto all = std::move(sessions);
  sessions.clear();
  for (auto& [ptr, session] : all) session->stop();
  closed.clear();
  poller.stop();
  io.stop();
}

StoreServer::StoreServer(StoreServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->listen();
  impl_->do_accept();
  impl_->poller.start();
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
