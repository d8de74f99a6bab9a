#pragma once
// One keep-alive HTTP/1.1 connection (Boost.Beast over its own io_context) where every call
// has a deadline: what the etcd client sends its JSON requests over. Connection problems are
// SocketError, a passed deadline SocketTimeout (common/error.hpp), saying what failed and why
// ("connecting: Connection refused"; the caller names the member); the connection is closed
// after either, and the next call reconnects. With a TlsContext it speaks HTTPS and verifies
// that the member's certificate names the host dialled. Not thread-safe: one caller at a time.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/deadline.hpp"

namespace ddp::rendezvous {

// TLS settings of an etcd client: files in PEM. No ca_file: the system's CA certificates.
struct TlsOptions {
  std::string ca_file;
  std::string cert_file;  // a client certificate (with key_file) for clusters that ask for one
  std::string key_file;
};
// The loaded certificates, shared by every connection of a client (opaque: keeps OpenSSL out
// of this header).
struct TlsContext;
// ConfigError naming the file that cannot be loaded.
std::shared_ptr<TlsContext> make_tls_context(const TlsOptions& options);

class HttpConnection {
 public:
  // tls: null for plain HTTP.
  HttpConnection(std::string host, uint16_t port, std::shared_ptr<TlsContext> tls = nullptr);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  struct Reply {
    unsigned status = 0;
    std::string body;
  };
  // POSTs a JSON body to target (connecting first when needed) and reads the whole reply.
  // authorization, when not empty, goes in the Authorization header (etcd's auth token).
  Reply post(const std::string& target, const std::string& body, const Deadline& deadline,
             const std::string& authorization = "");

  // Streaming replies (etcd's /v3/watch): POSTs and reads the reply's header; returns its
  // status. Then next_line() returns the body's newline-separated lines as they arrive.
  unsigned open_stream(const std::string& target, const std::string& body, const Deadline& deadline,
                       const std::string& authorization = "");
  // The next line of the streamed body (without '\n'), nullopt once the body ended.
  std::optional<std::string> next_line(const Deadline& deadline);

  // True while connected, and no bytes, EOF or error wait unasked (a pooled connection the
  // server closed meanwhile answers false and is not reused).
  [[nodiscard]] bool reusable() const;
  // False when the last failure came before any byte of the request was sent (connect
  // failed), so the request surely never reached the server and can go elsewhere.
  [[nodiscard]] bool request_maybe_sent() const { return request_maybe_sent_; }
  // "http://host:port" or "https://host:port".
  [[nodiscard]] std::string url() const;
  void close();
  // From any thread: ends the call in progress (or the next one) with SocketError, e.g. a
  // watch that should stop. The only member function that is thread-safe.
  void interrupt();

 private:
  struct Impl;
  void connect(const Deadline& deadline);
  std::unique_ptr<Impl> impl_;
  bool request_maybe_sent_ = false;
};

}  // namespace ddp::rendezvous
