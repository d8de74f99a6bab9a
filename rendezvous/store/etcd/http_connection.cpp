#include "rendezvous/store/etcd/http_connection.hpp"

#include <poll.h>

#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <utility>

#include "common/error.hpp"
#include "common/host_address.hpp"

namespace ddp::rendezvous {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

struct TlsContext {
  asio::ssl::context ctx{asio::ssl::context::tls_client};
};

std::shared_ptr<TlsContext> make_tls_context(const TlsOptions& options) {
  auto tls = std::make_shared<TlsContext>();
  error_code ec;
  // Fails naming the option and the file, so a typo in a path is found at once.
  const auto check = [&ec](const char* what, const std::string& file) {
    if (ec)
      throw ConfigError("etcd TLS: " + std::string(what) + " '" + file + "': " + ec.message());
  };
  if (options.ca_file.empty()) {
    tls->ctx.set_default_verify_paths(ec);
    check("the system's CA certificates", "");
  } else {
    tls->ctx.load_verify_file(options.ca_file, ec);
    check("CA file", options.ca_file);
  }
  if (!options.cert_file.empty() || !options.key_file.empty()) {
    if (options.cert_file.empty() || options.key_file.empty()) {
      throw ConfigError("etcd TLS: a client certificate needs both cert and key files");
    }
    tls->ctx.use_certificate_chain_file(options.cert_file, ec);
    check("certificate file", options.cert_file);
    tls->ctx.use_private_key_file(options.key_file, asio::ssl::context::pem, ec);
    check("key file", options.key_file);
  }
  tls->ctx.set_verify_mode(asio::ssl::verify_peer);
  return tls;
}

namespace {
// Replies bigger than this are refused: the store's values are small, a range of every key
// under a prefix is counted, never listed.
constexpr uint64_t kMaxReplyBytes = uint64_t{64} << 20;
}  // namespace

struct HttpConnection::Impl {
  std::string host;
  uint16_t port = 0;
  std::shared_ptr<TlsContext> tls;
  asio::io_context ioc;
  // One of them while connected: plain HTTP, or HTTPS over a TCP stream.
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> secure;
  beast::flat_buffer buffer;
  bool connected = false;
  std::optional<http::response_parser<http::buffer_body>> streaming;
  std::string pending;  // streamed bytes not yet returned as a line

  Impl(std::string h, uint16_t p, std::shared_ptr<TlsContext> t)
      : host(std::move(h)), port(p), tls(std::move(t)) {}

  [[nodiscard]] std::string url() const {
    return (tls ? "https://" : "http://") + join_host_port(host, port);
  }
  // The TCP layer (timeouts, the socket); only while a stream exists.
  beast::tcp_stream& tcp() { return secure ? beast::get_lowest_layer(*secure) : *plain; }
  [[nodiscard]] bool has_stream() const { return plain.has_value() || secure.has_value(); }
  // Calls f with the stream HTTP goes over.
  template <class F>
  void with_stream(F&& f) {
    if (secure) {
      f(*secure);
    } else {
      f(*plain);
    }
  }

  // Runs the asynchronous operation `start` begins to completion or until deadline (the
  // stream's timer closes the socket, and the operation ends with beast::error::timeout).
  template <class Start>
  error_code run(const Deadline& deadline, Start&& start) {
    if (deadline.is_never()) {
      tcp().expires_never();
    } else {
      tcp().expires_at(deadline.time_point());
    }
    error_code result;
    std::forward<Start>(start)([&result](error_code ec, auto&&...) { result = ec; });
    ioc.restart();
    ioc.run();
    return result;
  }

  [[noreturn]] void fail(const char* what, const error_code& ec) {
    close();
    const std::string text = std::string(what) + ": " + ec.message();
    if (ec == beast::error::timeout) throw SocketTimeout(text);
    throw SocketError(text);
  }

  void close() {
    if (has_stream()) {
      error_code ignored;
      tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
      tcp().close();
    }
    secure.reset();
    plain.reset();
    buffer.clear();
    streaming.reset();
    pending.clear();
    connected = false;
  }

  void write(const std::string& target, const std::string& body, const std::string& authorization,
             const Deadline& deadline) {
    http::request<http::string_body> req{http::verb::post, target, 11};
    req.set(http::field::host, join_host_port(host, port));
    if (!authorization.empty()) req.set(http::field::authorization, authorization);
    req.set(http::field::content_type, "application/json");
    req.keep_alive(true);
    req.body() = body;
    req.prepare_payload();
    const error_code ec = run(deadline, [&](auto handler) {
      with_stream([&](auto& s) { http::async_write(s, req, std::move(handler)); });
    });
    if (ec) fail("sending the request", ec);
  }
};

HttpConnection::HttpConnection(std::string host, uint16_t port, std::shared_ptr<TlsContext> tls)
    : impl_(std::make_unique<Impl>(std::move(host), port, std::move(tls))) {}

HttpConnection::~HttpConnection() = default;

std::string HttpConnection::url() const {
  return impl_->url();
}

void HttpConnection::close() {
  impl_->close();
}

void HttpConnection::interrupt() {
  // Runs on the thread inside run(): closing the socket ends the pending operation there.
  asio::post(impl_->ioc, [impl = impl_.get()] {
    error_code ignored;
    if (impl->has_stream()) impl->tcp().socket().close(ignored);
  });
}

bool HttpConnection::reusable() const {
  if (!impl_->connected || impl_->streaming) return false;
  pollfd p{};
  p.fd = impl_->tcp().socket().native_handle();
  p.events = POLLIN;
  return ::poll(&p, 1, 0) == 0;
}

void HttpConnection::connect(const Deadline& deadline) {
  request_maybe_sent_ = false;
  if (impl_->connected) return;
  // The stream's timer does not cover the resolver: a timer of its own cancels it.
  tcp::resolver resolver(impl_->ioc);
  asio::steady_timer timer(impl_->ioc);
  tcp::resolver::results_type endpoints;
  error_code ec;
  bool timed_out = false;
  if (!deadline.is_never()) {
    timer.expires_at(deadline.time_point());
    timer.async_wait([&](error_code e) {
      if (e) return;  // cancelled: the resolve finished first
      timed_out = true;
      resolver.cancel();
    });
  }
  resolver.async_resolve(impl_->host, std::to_string(impl_->port),
                         [&](error_code e, tcp::resolver::results_type r) {
                           ec = e;
                           endpoints = std::move(r);
                           timer.cancel();
                         });
  impl_->ioc.restart();
  impl_->ioc.run();
  if (timed_out) impl_->fail("resolving the host", beast::error::timeout);
  if (ec) impl_->fail("resolving the host", ec);
  if (impl_->tls) {
    impl_->secure.emplace(impl_->ioc, impl_->tls->ctx);
    SSL* ssl = impl_->secure->native_handle();
    if (!is_ipv6_literal(impl_->host) &&
        impl_->host.find_first_not_of("0123456789.") != std::string::npos) {
      // SNI, for members behind a name (SSL_set_tlsext_host_name is a macro with a C cast).
      SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
               const_cast<char*>(impl_->host.c_str()));
    }
    // The member's certificate must name the host dialled (a name, or an IP address SAN).
    impl_->secure->set_verify_callback(asio::ssl::host_name_verification(impl_->host));
  } else {
    impl_->plain.emplace(impl_->ioc);
  }
  ec = impl_->run(deadline,
                  [&](auto handler) { impl_->tcp().async_connect(endpoints, std::move(handler)); });
  if (ec) impl_->fail("connecting", ec);
  impl_->tcp().socket().set_option(tcp::no_delay(true), ec);
  if (impl_->secure) {
    ec = impl_->run(deadline, [&](auto handler) {
      impl_->secure->async_handshake(asio::ssl::stream_base::client, std::move(handler));
    });
    if (ec) impl_->fail("TLS handshake", ec);
  }
  impl_->connected = true;
}

HttpConnection::Reply HttpConnection::post(const std::string& target, const std::string& body,
                                           const Deadline& deadline,
                                           const std::string& authorization) {
  if (impl_->streaming) impl_->close();  // a stream left half-read cannot carry a request
  connect(deadline);
  request_maybe_sent_ = true;
  impl_->write(target, body, authorization, deadline);
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxReplyBytes);
  const error_code ec = impl_->run(deadline, [&](auto handler) {
    impl_->with_stream(
        [&](auto& s) { http::async_read(s, impl_->buffer, parser, std::move(handler)); });
  });
  if (ec) impl_->fail("reading the reply", ec);
  Reply reply;
  reply.status = parser.get().result_int();
  const bool keep = parser.get().keep_alive();
  reply.body = std::move(parser.get().body());
  if (!keep) impl_->close();
  return reply;
}

unsigned HttpConnection::open_stream(const std::string& target, const std::string& body,
                                     const Deadline& deadline, const std::string& authorization) {
  if (impl_->streaming) impl_->close();
  connect(deadline);
  request_maybe_sent_ = true;
  impl_->write(target, body, authorization, deadline);
  impl_->streaming.emplace();
  impl_->streaming->body_limit(boost::none);  // a watch streams for as long as it lives
  const error_code ec = impl_->run(deadline, [&](auto handler) {
    impl_->with_stream([&](auto& s) {
      http::async_read_header(s, impl_->buffer, *impl_->streaming, std::move(handler));
    });
  });
  if (ec) impl_->fail("reading the reply header", ec);
  return impl_->streaming->get().result_int();
}

std::optional<std::string> HttpConnection::next_line(const Deadline& deadline) {
  auto& parser = impl_->streaming;
  if (!parser) throw SocketError("no stream open");
  for (;;) {
    const auto newline = impl_->pending.find('\n');
    if (newline != std::string::npos) {
      std::string line = impl_->pending.substr(0, newline);
      impl_->pending.erase(0, newline + 1);
      return line;
    }
    if (parser->is_done()) {
      std::string rest = std::move(impl_->pending);
      impl_->pending.clear();
      impl_->close();
      if (rest.empty()) return std::nullopt;
      return rest;
    }
    std::array<char, 8192> chunk{};
    parser->get().body().data = chunk.data();
    parser->get().body().size = chunk.size();
    error_code ec = impl_->run(deadline, [&](auto handler) {
      impl_->with_stream(
          [&](auto& s) { http::async_read_some(s, impl_->buffer, *parser, std::move(handler)); });
    });
    if (ec == http::error::need_buffer) ec = {};
    if (ec) impl_->fail("reading the stream", ec);
    impl_->pending.append(chunk.data(), chunk.size() - parser->get().body().size);
  }
}

}  // namespace ddp::rendezvous
