#include "launcher/health/health_server.hpp"

#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <list>
#include <optional>

#include "common/error.hpp"
#include "common/host_address.hpp"
#include "common/log.hpp"

namespace ddp::launcher {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

// After a failed accept (out of file descriptors): try again this much later, not at once.
constexpr std::chrono::milliseconds kAcceptRetry{100};
constexpr int kBacklog = 16;
// After the last reply: how long what the client still sends is read and dropped before the
// connection is closed. Closing with unread bytes would send a reset, which can destroy the
// reply (a 413 to a client still sending its body) before the client has read it.
constexpr std::chrono::milliseconds kLinger{1000};

class Connection;

// The status a request that could not be read gets, or nullopt: just close (the client
// went away, was too slow, or the server stops).
std::optional<unsigned> status_for_read_error(const error_code& ec) {
  if (ec == http::error::header_limit || ec == http::error::buffer_overflow) return 431;
  if (ec == http::error::body_limit) return 413;
  if (ec == http::error::end_of_stream || ec == http::error::partial_message) return std::nullopt;
  if (ec.category() == make_error_code(http::error::bad_method).category()) return 400;
  return std::nullopt;
}

std::string_view view(beast::string_view text) {
  return {text.data(), text.size()};
}

}  // namespace

struct HealthServer::State {
  State(asio::io_context& io, HealthServerOptions o, HttpHandler h)
      : acceptor(io), retry(io), options(std::move(o)), handler(std::move(h)) {}

  void stop();

  tcp::acceptor acceptor;
  asio::steady_timer retry;
  HealthServerOptions options;
  HttpHandler handler;
  bool stopped = false;
  bool accept_failing = false;  // warn once per run of failed accepts
  std::list<std::weak_ptr<Connection>> connections;
};

namespace {

// One client connection: read a request (under the deadline), answer it, and read the next
// while the client keeps the connection alive.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, std::shared_ptr<HealthServer::State> server)
      : stream_(std::move(socket)),
        buffer_(server->options.max_request_bytes),
        server_(std::move(server)),
        entry_(server_->connections.emplace(server_->connections.end())) {}
  ~Connection() { server_->connections.erase(entry_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void start() {
    *entry_ = weak_from_this();
    read();
  }
  void close() { stream_.close(); }

 private:
  void read() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(server_->options.max_request_bytes));
    parser_->body_limit(server_->options.max_request_bytes);
    stream_.expires_after(server_->options.request_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(const error_code& ec) {
    if (server_->stopped) return;
    if (ec) {
      if (auto status = status_for_read_error(ec)) {
        DDP_LOG_DEBUG("health endpoint: bad request (" + ec.message() + "); answering " +
                      std::to_string(*status) + " and closing");
        HttpReply reply;
        reply.status = *status;
        reply.body = ec.message() + "\n";
        write(reply, 11, false);
      }
      return;  // dropping the last reference closes the connection
    }
    const auto& request = parser_->get();
    const HttpReply reply = server_->handler(view(request.method_string()), view(request.target()));
    write(reply, request.version(), request.keep_alive());
  }

  void write(const HttpReply& reply, unsigned version, bool keep_alive) {
    response_ = {};
    response_.version(version);
    response_.result(reply.status);
    response_.set(http::field::server, "ddplaunch");
    response_.set(http::field::content_type, reply.content_type);
    if (!reply.allow.empty()) response_.set(http::field::allow, reply.allow);
    response_.keep_alive(keep_alive);
    response_.body() = reply.body;
    response_.prepare_payload();
    stream_.expires_after(server_->options.request_timeout);
    http::async_write(stream_, response_,
                      [self = shared_from_this(), keep_alive](error_code ec, size_t) {
                        if (ec || self->server_->stopped) return;
                        if (keep_alive) {
                          self->read();
                        } else {
                          self->linger();
                        }
                      });
  }

  void linger() {
    error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(kLinger);
    drain();
  }
  void drain() {
    stream_.async_read_some(asio::buffer(scratch_),
                            [self = shared_from_this()](error_code ec, size_t) {
                              if (!ec && !self->server_->stopped) self->drain();
                            });
  }

  beast::tcp_stream stream_;
  std::array<char, 512> scratch_{};
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> response_;
  std::shared_ptr<HealthServer::State> server_;
  std::list<std::weak_ptr<Connection>>::iterator entry_;
};

void accept_next(const std::shared_ptr<HealthServer::State>& state) {
  state->acceptor.async_accept([state](error_code ec, tcp::socket socket) {
    if (state->stopped || ec == asio::error::operation_aborted) return;
    if (ec) {
      if (!state->accept_failing) DDP_LOG_WARN("health endpoint: accept failed: " + ec.message());
      state->accept_failing = true;
      state->retry.expires_after(kAcceptRetry);
      state->retry.async_wait([state](error_code wait_ec) {
        if (!wait_ec && !state->stopped) accept_next(state);
      });
      return;
    }
    state->accept_failing = false;
    if (static_cast<int>(state->connections.size()) >= state->options.max_connections) {
      // Busy with as many clients as it serves: this one is closed, the agent is not slowed.
      DDP_LOG_DEBUG("health endpoint: " + std::to_string(state->connections.size()) +
                    " connections open already; closing a new one");
      error_code ignored;
      socket.close(ignored);
    } else {
      std::make_shared<Connection>(std::move(socket), state)->start();
    }
    accept_next(state);
  });
}

tcp::endpoint listen_endpoint(const std::string& host, uint16_t port) {
  const std::string address_text = host == "localhost" ? "127.0.0.1" : normalize_host(host);
  error_code ec;
  auto address = asio::ip::make_address(address_text, ec);
  if (ec) {
    throw ConfigError("--health_bind=" + host +
                      ": expected an IP address (127.0.0.1, ::1, 0.0.0.0 or ::) or localhost");
  }
  return {address, port};
}

}  // namespace

void HealthServer::State::stop() {
  stopped = true;
  error_code ignored;
  acceptor.close(ignored);
  retry.cancel();
  for (auto& weak : connections) {
    if (auto connection = weak.lock()) connection->close();
  }
}

HealthServer::HealthServer(asio::io_context& io, HealthServerOptions options, HttpHandler handler)
    : state_(std::make_shared<State>(io, std::move(options), std::move(handler))) {
  const auto& o = state_->options;
  const auto endpoint = listen_endpoint(o.host, o.port);
  auto fail = [&](const char* what, const error_code& ec) {
    std::string text = "--health_port=" + std::to_string(o.port) + ": cannot " + what + " " +
                       join_host_port(endpoint.address().to_string(), o.port) + ": " + ec.message();
    if (ec == asio::error::address_in_use) {
      text += " (another process listens there; pick another port, or 0 for a free one)";
    }
    throw ConfigError(text);
  };
  error_code ec;
  auto& acceptor = state_->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (ec) fail("open a socket for", ec);
  // Rebinding right after a previous agent (connections in TIME_WAIT) works; a port another
  // process listens on is still refused.
  acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (endpoint.address().is_v6() && endpoint.address().is_unspecified()) {
    acceptor.set_option(asio::ip::v6_only(false), ec);  // "::" serves IPv4 clients too
  }
  acceptor.bind(endpoint, ec);
  if (ec) fail("listen on", ec);
  acceptor.listen(kBacklog, ec);
  if (ec) fail("listen on", ec);
  accept_next(state_);
}

HealthServer::~HealthServer() {
  state_->stop();
}

uint16_t HealthServer::port() const {
  error_code ec;
  return state_->acceptor.local_endpoint(ec).port();
}

std::string HealthServer::url() const {
  error_code ec;
  const auto endpoint = state_->acceptor.local_endpoint(ec);
  return "http://" + join_host_port(endpoint.address().to_string(), endpoint.port());
}

}  // namespace ddp::launcher
