#include "rendezvous/store/tcp_store.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "common/error.hpp"
#include "common/host_address.hpp"
#include "common/peer_tolerance.hpp"
#include "common/socket_io.hpp"
#include "common/tcp_liveness.hpp"
#include "rendezvous/store/auth.hpp"
#include "rendezvous/store/wire_codec.hpp"

namespace ddp::rendezvous {

using wire::Command;

namespace {

// After a wait times out the client sends CANCEL_WAIT; the server answers at once, so this
// only bounds a server that died in between, or one silent for a while (a network blip, a
// paused host): silence shorter than the peer tolerance must not end the connection.
Duration cancel_reply_timeout() {
  return std::max<Duration>(std::chrono::seconds(10),
                            peer_tolerance_from_env() + std::chrono::seconds(2));
}
// Idle wait connections kept per client (more waiting threads open more, then close them).
constexpr size_t kMaxIdleWaitConnections = 4;

wire::Request make(Command command, std::vector<std::string> keys = {},
                   std::vector<std::string> values = {}) {
  wire::Request r;
  r.command = command;
  r.keys = std::move(keys);
  r.values = std::move(values);
  return r;
}

// A wait that timed out and was cancelled: the connection is still in sync, keep it.
class WaitTimedOut : public StoreTimeout {
 public:
  using StoreTimeout::StoreTimeout;
};

uint8_t recv_u8(SocketConn& conn, const Deadline& deadline) {
  return static_cast<uint8_t>(conn.recv_exact(1, deadline)[0]);
}

int64_t recv_i64(SocketConn& conn, const Deadline& deadline) {
  return static_cast<int64_t>(wire::get_u64(conn.recv_exact(8, deadline).data()));
}

}  // namespace

struct TcpStore::Impl {
  explicit Impl(TcpStoreOptions opts)
      : options(std::move(opts)), endpoint("tcp://" + join_host_port(options.host, options.port)) {}

  // (Re)connects c, sends the VALIDATE handshake and negotiates ddplaunch's dialect, proving
  // the secret where the store asks (the caller owns c: holds mu for conn).
  void ensure_connected(SocketConn& c) {
    // Between requests the server never speaks first, so a readable socket means it closed
    // (restarted, stopped). Reconnect now: a SET sent into that socket has no reply and would
    // be lost without an error.
    if (c.is_open() && c.readable_now()) c.close();
    if (c.is_open()) return;
    const TcpLiveness liveness = tcp_liveness_from_env();
    // The first connect waits for a store not started yet; a reconnect to a store that was
    // there takes a refusal as its end (docs/multinode.md, "Silence or death"): a node that
    // leaves after the store host did must not wait out connect_timeout for it.
    c = SocketConn::connect(options.host, options.port, options.connect_timeout, "store",
                            /*give_up_when_refused=*/connected_once.load());
    connected_once = true;
    set_tcp_liveness(c.fd(), liveness);
    try {
      negotiate(c, Deadline::after(options.connect_timeout));
    } catch (...) {
      c.close();
      throw;
    }
  }
  void ensure_connected() { ensure_connected(conn); }

  // VALIDATE and the CHECK of the extension probe in one write; on our server, the
  // challenge-response (docs/store.md, "Authentication").
  void negotiate(SocketConn& c, const Deadline& deadline) {
    wire::Request hello = make(Command::kValidate);
    hello.nonce = wire::kValidationMagic;
    c.send_all(wire::encode_request(hello, wire::Dialect::kV2) +
                   wire::encode_request(make(Command::kCheck, {wire::kExtensionProbeKey}),
                                        wire::Dialect::kV2),
               deadline);
    native = recv_u8(c, deadline) == wire::kCheckReady;
    if (!native) {
      if (!options.secret.empty()) {
        throw AuthError("store " + address() +
                        " does not speak ddplaunch's dialect (a PyTorch TCPStore?), so it cannot "
                        "check the job secret this client was given (--secret_file / " +
                        "DDPLAUNCH_SECRET_FILE)");
      }
      return;
    }
    c.send_all(wire::encode_request(make(Command::kAuthChallenge), wire::Dialect::kNative),
               deadline);
    const uint8_t required = recv_u8(c, deadline);
    const std::string server_nonce = c.recv_string(deadline);
    if (required == wire::kAuthNotRequired) {
      if (!options.secret.empty()) {
        // An empty proof: the store logs one line naming this client, and no MAC of ours
        // goes to a store that cannot check it.
        c.send_all(
            wire::encode_request(make(Command::kAuthProof, {""}, {""}), wire::Dialect::kNative),
            deadline);
        throw AuthError("store " + address() +
                        " refused authentication: it has no secret but this client has one "
                        "(start the store with the same --secret_file, or drop the client's)");
      }
      return;
    }
    if (required != wire::kAuthRequired) {
      throw ProtocolError("AUTH_CHALLENGE answered " + std::to_string(required));
    }
    if (options.secret.empty()) {
      throw AuthError("store " + address() +
                      " refused authentication: it requires the job secret and this client has "
                      "none (check --secret_file / DDPLAUNCH_SECRET_FILE)");
    }
    const std::string client_nonce = auth::random_nonce();
    c.send_all(
        wire::encode_request(make(Command::kAuthProof, {client_nonce},
                                  {auth::client_proof(options.secret, server_nonce, client_nonce)}),
                             wire::Dialect::kNative),
        deadline);
    std::string server_mac;
    try {
      if (recv_u8(c, deadline) != wire::kAuthAccepted) throw ProtocolError("AUTH_PROOF refused");
      server_mac = c.recv_string(deadline);
    } catch (const SocketTimeout&) {
      throw;
    } catch (const Error&) {
      throw AuthError("store " + address() +
                      " refused authentication: wrong secret (check --secret_file / "
                      "DDPLAUNCH_SECRET_FILE)");
    }
    if (!auth::same_mac(server_mac,
                        auth::server_proof(options.secret, server_nonce, client_nonce))) {
      throw AuthError("store " + address() +
                      " answered the challenge without knowing the job secret: not the store "
                      "of this job");
    }
  }

  [[nodiscard]] std::string address() const { return join_host_port(options.host, options.port); }

  // Runs body under the lock; any failure drops the connection (its byte stream is no
  // longer in a known state) and is rethrown naming endpoint, operation, keys and timeout.
  template <typename Body>
  auto call(const char* op, const std::vector<std::string>& keys, Duration timeout, Body&& body) {
    std::lock_guard<std::mutex> lock(mu);
    try {
      ensure_connected();
      return body(Deadline::after(timeout));
    } catch (const SocketTimeout& e) {
      conn.close();
      throw StoreTimeout(context(op, keys) + ": timed out after " + describe_timeout(timeout) +
                         " (" + e.what() + ")");
    } catch (const SocketError& e) {
      conn.close();
      throw StoreError(context(op, keys) + ": " + e.what(), e.loss());
    } catch (const ProtocolError& e) {
      conn.close();
      throw StoreError(context(op, keys) + ": bad reply: " + e.what());
    }
  }

  std::string context(const char* op, const std::vector<std::string>& keys) const {
    std::string s = "store " + endpoint + ": " + op;
    if (!keys.empty()) s += " of keys " + join_keys(keys);
    return s;
  }

  static void send(SocketConn& c, const wire::Request& r, const Deadline& deadline) {
    c.send_all(wire::encode_request(r, wire::Dialect::kV2), deadline);
  }
  void send(const wire::Request& r, const Deadline& deadline) { send(conn, r, deadline); }

  // Blocking waits run on a connection of their own (taken from a small pool), so a thread
  // blocked in wait()/get() never holds up other threads' requests on the shared one, as
  // with MemoryStore. Errors name endpoint, operation, keys and timeout.
  void wait_unlocked(const char* op, const std::vector<std::string>& keys, Duration timeout) {
    if (options.one_connection) {
      call(op, keys, timeout, [&](const Deadline&) { wait_on(conn, op, keys, timeout); });
      return;
    }
    SocketConn c = take_wait_conn();
    try {
      ensure_connected(c);
      wait_on(c, op, keys, timeout);
      give_back(std::move(c));
    } catch (const WaitTimedOut&) {
      give_back(std::move(c));  // still in sync after CANCEL_WAIT
      throw;
    } catch (const SocketTimeout& e) {
      throw StoreTimeout(context(op, keys) + ": " + e.what());
    } catch (const SocketError& e) {
      throw StoreError(context(op, keys) + ": " + e.what(), e.loss());
    } catch (const ProtocolError& e) {
      throw StoreError(context(op, keys) + ": bad reply: " + e.what());
    }
  }

  SocketConn take_wait_conn() {
    std::lock_guard<std::mutex> lock(pool_mu);
    if (idle_wait_conns.empty()) return SocketConn();
    SocketConn c = std::move(idle_wait_conns.back());
    idle_wait_conns.pop_back();
    return c;
  }
  void give_back(SocketConn c) {
    std::lock_guard<std::mutex> lock(pool_mu);
    // A few idle connections cover the usual handful of waiting threads.
    if (idle_wait_conns.size() < kMaxIdleWaitConnections) idle_wait_conns.push_back(std::move(c));
  }

  // WAIT; on timeout CANCEL_WAIT (the connection stays usable) and StoreTimeout naming the
  // keys still missing. A server that goes away ends the wait at once with StoreError.
  void wait_on(SocketConn& c, const char* op, const std::vector<std::string>& keys,
               Duration timeout) const {
    send(c, make(Command::kWait, keys), Deadline::after(timeout));
    try {
      const uint8_t r = recv_u8(c, Deadline::after(timeout));
      if (r != wire::kWaitStopWaiting) {
        throw ProtocolError("WAIT answered " + std::to_string(r) + ", expected 0");
      }
      return;
    } catch (const SocketTimeout&) {
      // fall through to cancel
    }
    const Duration reply_timeout = cancel_reply_timeout();
    send(c, make(Command::kCancelWait), Deadline::after(reply_timeout));
    uint8_t r = recv_u8(c, Deadline::after(reply_timeout));
    if (r == wire::kWaitStopWaiting) r = recv_u8(c, Deadline::after(reply_timeout));
    if (r != wire::kWaitCanceled) {
      throw ProtocolError("CANCEL_WAIT answered " + std::to_string(r) + ", expected 1");
    }
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (missing.size() >= 8) break;  // enough to name in a message
      send(c, make(Command::kCheck, {k}), Deadline::after(reply_timeout));
      if (recv_u8(c, Deadline::after(reply_timeout)) != wire::kCheckReady) {
        missing.push_back(k);
      }
    }
    throw WaitTimedOut(
        "store " + endpoint + ": " + op + " timed out after " + describe_timeout(timeout) +
        " waiting for keys " + join_keys(missing.empty() ? keys : missing) + " (" +
        std::to_string(missing.size()) + "/" + std::to_string(keys.size()) + " checked missing)");
  }

  TcpStoreOptions options;
  std::string endpoint;
  std::atomic<bool> native{false};          // the store speaks kNative (learnt at each connect)
  std::atomic<bool> connected_once{false};  // a connection has succeeded before
  std::mutex mu;                            // guards conn: one short request at a time
  SocketConn conn;
  std::mutex pool_mu;  // guards idle_wait_conns
  std::vector<SocketConn> idle_wait_conns;
};

TcpStore::TcpStore(TcpStoreOptions options)
    : Store(options.timeout), impl_(std::make_unique<Impl>(std::move(options))) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  try {
    impl_->ensure_connected();
  } catch (const SocketTimeout& e) {
    throw StoreError(impl_->endpoint + ": handshake failed: " + e.what());
  } catch (const SocketError& e) {
    throw StoreError(e.what(), e.loss());  // "cannot connect to store at tcp://..."
  } catch (const ProtocolError& e) {
    throw StoreError(impl_->endpoint + ": handshake failed: bad reply: " + e.what());
  }
}

TcpStore::~TcpStore() = default;

std::string TcpStore::describe() const {
  return impl_->endpoint;
}

void TcpStore::set(const std::string& key, const std::string& value) {
  impl_->call("set", {key}, timeout(), [&](const Deadline& deadline) {
    impl_->send(make(Command::kSet, {key}, {value}), deadline);
  });
}

std::string TcpStore::get(const std::string& key) {
  // As PyTorch's client: wait for the key first, so a missing key times out cleanly.
  impl_->wait_unlocked("get", {key}, timeout());
  return impl_->call("get", {key}, timeout(), [&](const Deadline& deadline) {
    impl_->send(make(Command::kGet, {key}), deadline);
    return impl_->conn.recv_string(deadline);
  });
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  return impl_->call("add", {key}, timeout(), [&](const Deadline& deadline) {
    wire::Request r = make(Command::kAdd, {key});
    r.delta = delta;
    impl_->send(r, deadline);
    return recv_i64(impl_->conn, deadline);
  });
}

std::string TcpStore::compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) {
  return impl_->call("compare_set", {key}, timeout(), [&](const Deadline& deadline) {
    impl_->send(make(Command::kCompareSet, {key}, {expected, desired}), deadline);
    return impl_->conn.recv_string(deadline);
  });
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  return impl_->call("check", keys, timeout(), [&](const Deadline& deadline) {
    impl_->send(make(Command::kCheck, keys), deadline);
    const uint8_t r = recv_u8(impl_->conn, deadline);
    if (r > wire::kCheckNotReady) {
      throw ProtocolError("CHECK answered " + std::to_string(r) + ", expected 0 or 1");
    }
    return r == wire::kCheckReady;
  });
}

void TcpStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  impl_->wait_unlocked("wait", keys, timeout);
}

bool TcpStore::delete_key(const std::string& key) {
  return impl_->call("delete_key", {key}, timeout(), [&](const Deadline& deadline) {
    impl_->send(make(Command::kDeleteKey, {key}), deadline);
    return recv_i64(impl_->conn, deadline) == 1;
  });
}

int64_t TcpStore::num_keys() {
  return impl_->call("num_keys", {}, timeout(), [&](const Deadline& deadline) {
    impl_->send(make(Command::kGetNumKeys), deadline);
    return recv_i64(impl_->conn, deadline);
  });
}

void TcpStore::append(const std::string& key, const std::string& value) {
  impl_->call("append", {key}, timeout(), [&](const Deadline& deadline) {
    impl_->send(make(Command::kAppend, {key}, {value}), deadline);
  });
}

std::vector<std::string> TcpStore::multi_get(const std::vector<std::string>& keys) {
  impl_->wait_unlocked("multi_get", keys, timeout());
  return impl_->call("multi_get", keys, timeout(), [&](const Deadline& deadline) {
    impl_->send(make(Command::kMultiGet, keys), deadline);
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) out.push_back(impl_->conn.recv_string(deadline));
    return out;
  });
}

void TcpStore::multi_set(const std::vector<std::string>& keys,
                         const std::vector<std::string>& values) {
  if (keys.size() != values.size()) {
    throw ConfigError("multi_set: " + std::to_string(keys.size()) + " keys but " +
                      std::to_string(values.size()) + " values");
  }
  impl_->call("multi_set", keys, timeout(), [&](const Deadline& deadline) {
    impl_->send(make(Command::kMultiSet, keys, values), deadline);
  });
}

namespace {

// A connection of its own holding close actions (Presence). It never reconnects: a new
// connection would not carry the records, and the server already ran them when the old one
// dropped, so a broken connection is reported (StoreError) instead.
class TcpPresence final : public Presence {
 public:
  TcpPresence(SocketConn conn, std::string endpoint, Duration timeout)
      : conn_(std::move(conn)), endpoint_(std::move(endpoint)), timeout_(timeout) {}
  ~TcpPresence() override {
    try {
      clear();
    } catch (const Error&) {
      // Gone already: the server ran the close actions, which is all a leave could do.
    }
  }
  void on_close(const std::string& key, const std::string& value) override {
    request(make(Command::kOnClose, {key}, {value}));
  }
  void set_ephemeral(const std::string& key, const std::string& value) override {
    request(make(Command::kEphemeral, {key}, {value}));
  }
  void clear() override { request(make(Command::kClearCloseActions)); }

 private:
  void request(const wire::Request& r) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string what = "store " + endpoint_ + ": " + wire::command_name(r.command) +
                             (r.keys.empty() ? "" : " of " + join_keys(r.keys));
    if (!conn_.is_open()) throw StoreError(what + ": the presence connection was lost earlier");
    try {
      const auto deadline = Deadline::after(timeout_);
      conn_.send_all(wire::encode_request(r, wire::Dialect::kNative), deadline);
      const uint8_t reply = recv_u8(conn_, deadline);
      if (reply != wire::kCloseActionDone) {
        throw ProtocolError("answered " + std::to_string(reply) + ", expected 0");
      }
    } catch (const SocketError& e) {
      conn_.close();
      throw StoreError(what + ": " + e.what(), e.loss());
    } catch (const Error& e) {
      conn_.close();
      throw StoreError(what + ": " + e.what());
    }
  }

  std::mutex mu_;
  SocketConn conn_;
  std::string endpoint_;
  Duration timeout_;
};

}  // namespace

std::unique_ptr<Presence> TcpStore::open_presence() {
  SocketConn c;
  try {
    impl_->ensure_connected(c);
    if (!impl_->native) return nullptr;  // a PyTorch server
  } catch (const AuthError&) {
    throw;
  } catch (const StoreError& e) {
    throw StoreError("store " + impl_->endpoint + ": opening a presence connection: " + e.what(),
                     e.loss());
  } catch (const SocketError& e) {
    throw StoreError("store " + impl_->endpoint + ": opening a presence connection: " + e.what(),
                     e.loss());
  } catch (const Error& e) {
    throw StoreError("store " + impl_->endpoint + ": opening a presence connection: " + e.what());
  }
  return std::make_unique<TcpPresence>(std::move(c), impl_->endpoint, timeout());
}

void TcpStore::set_worker_namespace(const std::string& prefix) {
  impl_->call("set_worker_namespace", {prefix}, timeout(), [&](const Deadline& deadline) {
    if (!impl_->native) return;
    impl_->conn.send_all(
        wire::encode_request(make(Command::kWorkerNamespace, {prefix}), wire::Dialect::kNative),
        deadline);
    if (recv_u8(impl_->conn, deadline) != wire::kCloseActionDone) {
      throw ProtocolError("WORKER_NAMESPACE refused");
    }
  });
}

void TcpStore::ping() {
  impl_->call("ping", {}, timeout(), [&](const Deadline& deadline) {
    wire::Request r = make(Command::kPing);
    r.nonce = static_cast<uint32_t>(::getpid());
    impl_->send(r, deadline);
    const uint32_t echoed = wire::get_u32(impl_->conn.recv_exact(4, deadline).data());
    if (echoed != r.nonce) {
      throw ProtocolError("PING echoed " + std::to_string(echoed) + ", sent " +
                          std::to_string(r.nonce));
    }
  });
}

}  // namespace ddp::rendezvous
