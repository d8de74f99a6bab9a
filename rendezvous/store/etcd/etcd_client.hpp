#pragma once
// A client of etcd v3's HTTP/JSON gateway (/v3/kv/*, /v3/watch) over one or more members.
// Requests go to the member in use; a connection error, no answer within attempt_timeout, or a
// member that answers "unavailable" (no leader, stopping), moves every later call on to the
// next member, and the call itself is retried there when that is safe: always before any
// byte was sent, and after that only for idempotent requests; a request that is not, whose
// outcome became unknown, is EtcdOutcomeUnknown for the caller to resolve. Each call has a
// deadline. Errors are
// StoreError naming the member, the caller's context (operation and key) and etcd's own message;
// when no member answers, every endpoint tried with its last error. Thread-safe: calls take a
// pooled connection each, so a blocked watch never holds up other calls.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/deadline.hpp"
#include "common/error.hpp"
#include "rendezvous/store/etcd/etcd_codec.hpp"
#include "rendezvous/store/etcd/http_connection.hpp"

namespace ddp::rendezvous {

// Stops an EtcdClient::watch from another thread. Thread-safe.
class WatchCancel {
 public:
  void cancel();
  [[nodiscard]] bool cancelled() const;

 private:
  friend class EtcdClient;
  void attach(HttpConnection* conn);
  mutable std::mutex mu_;
  HttpConnection* conn_ = nullptr;
  bool cancelled_ = false;
};

// A request that is not idempotent was sent, and no answer says whether it took effect: the
// connection was lost after sending, the member held it past attempt_timeout, or it answered
// UNAVAILABLE after proposing it ("request timed out", "leader changed"). etcd may still
// apply it later (a proposal replicated before its member died commits under the next
// leader). The client has already moved on to the next member; the caller decides whether
// sending it again is safe (EtcdStore's transactions carry a marker that makes it so).
class EtcdOutcomeUnknown : public StoreError {
 public:
  using StoreError::StoreError;
};

struct EtcdClientOptions {
  // "host:port" or "http://host:port", tried in this order.
  std::vector<std::string> endpoints{"127.0.0.1:2379"};
  // How long a call keeps going round the members while none answers before StoreError
  // naming each of them (the call's own deadline may end it sooner).
  std::chrono::milliseconds unreachable_timeout = std::chrono::seconds(10);
  // How long one member may hold a request (or a new watch) without answering before the
  // call moves on to the next; a quiet watch is opened again this often (from the revision it
  // reached, so nothing is missed), which is how a stopped member is noticed.
  std::chrono::milliseconds attempt_timeout = std::chrono::seconds(10);
  // etcd user and password when the cluster has auth enabled ("" = no auth): each member
  // is asked for a token (/v3/auth/authenticate) on first use, and again when it answers
  // that the token is invalid (simple tokens live on one member only).
  std::string username;
  std::string password;
  // TLS files: https:// endpoints use them, and so do bare host:port ones when any is given.
  TlsOptions tls;
};

class EtcdClient {
 public:
  // ConfigError when there is no endpoint or one does not parse. Connects lazily.
  explicit EtcdClient(EtcdClientOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // POSTs body to path ("/v3/kv/range") and returns etcd's reply. context ("add 'key'")
  // goes into errors. SocketTimeout-free: a passed deadline is StoreTimeout (saying the
  // outcome is unknown when a request that is not idempotent may have been sent). Not
  // idempotent: EtcdOutcomeUnknown (after failing over) when it may have taken effect.
  nlohmann::json call(const std::string& path, const nlohmann::json& body, const Deadline& deadline,
                      const std::string& context, bool idempotent);

  enum class WatchResult { kMatched, kCompacted, kTimedOut, kCancelled };
  // Watches key from start_revision until its first PUT event (kMatched), the revision was
  // compacted away (kCompacted: read again), or deadline (kTimedOut). A member lost
  // mid-watch is replaced by the next one, resuming after the last event seen, so no PUT is
  // missed.
  WatchResult watch_for_put(const std::string& key, int64_t start_revision,
                            const Deadline& deadline, const std::string& context);

  struct WatchSpec {
    std::string key;
    std::string range_end;  // "" for key alone
    int64_t start_revision = 0;
    bool prev_kv = false;  // DELETE events carry the deleted kv
    bool no_put = false;   // PUT events are left out
  };
  // Hands each batch of events (the gateway's "events" array) to on_events until it returns
  // true (kMatched), the revision was compacted (kCompacted), deadline (kTimedOut) or
  // cancel.cancel() from another thread (kCancelled); resumes on the next member like
  // watch_for_put.
  WatchResult watch(const WatchSpec& spec, const Deadline& deadline, const std::string& context,
                    const std::function<bool(const nlohmann::json& events)>& on_events,
                    class WatchCancel* cancel = nullptr);

  // "http://a:2379" or "http://a:2379,http://b:2379".
  [[nodiscard]] std::string endpoints_text() const;
  // The member calls go to now.
  [[nodiscard]] std::string current_endpoint() const;

 private:
  struct Failures;
  std::unique_ptr<HttpConnection> take(size_t member);
  void give_back(size_t member, std::unique_ptr<HttpConnection> conn);
  // Moves on from member (unless another call already did), logging why (a warning when
  // first, the call's first failure; debug after); returns the member now in use.
  size_t fail_over(size_t member, const std::string& why, bool first);

  // A new connection to member (TLS when its endpoint is https).
  std::unique_ptr<HttpConnection> connect_to(size_t member) const;

  std::vector<EtcdEndpoint> endpoints_;
  std::shared_ptr<TlsContext> tls_;  // null when no endpoint speaks TLS
  EtcdClientOptions options_;
  std::atomic<size_t> current_{0};
  std::mutex pool_mu_;
  std::vector<std::vector<std::unique_ptr<HttpConnection>>> idle_;
  // The token for member (authenticating when there is none yet); "" without a username.
  // SocketError when the member cannot be reached, StoreError naming etcd's answer when it
  // refuses the user or password.
  std::string token(size_t member, const Deadline& deadline, const std::string& context);
  // The member refused its token: the next token() asks for a new one.
  void forget_token(size_t member);
  std::mutex token_mu_;
  std::vector<std::string> tokens_;
};

}  // namespace ddp::rendezvous
