#include "rendezvous/store/etcd/etcd_client.hpp"

#include <algorithm>
#include <thread>
#include <utility>

#include "common/error.hpp"
#include "common/log.hpp"
#include "rendezvous/store/etcd/http_connection.hpp"

namespace ddp::rendezvous {
namespace {

// gRPC's UNAVAILABLE: the member has no leader, is stopping, or lost its leader mid-request.
constexpr int kGrpcUnavailable = 14;
// gRPC's UNAUTHENTICATED: the token is unknown to this member (or expired): authenticate again.
constexpr int kGrpcUnauthenticated = 16;
constexpr auto kFirstBackoff = std::chrono::milliseconds(50);
constexpr auto kMaxBackoff = std::chrono::milliseconds(500);
constexpr size_t kMaxIdlePerMember = 8;

// etcd's error reply: {"error": ..., "message": ..., "code": N}, or a body that is not JSON.
struct EtcdReplyError {
  int code = 0;
  std::string message;
};

EtcdReplyError reply_error(const nlohmann::json& j, const std::string& raw) {
  EtcdReplyError e;
  if (j.is_object()) {
    const auto code = j.find("code");
    if (code != j.end() && code->is_number_integer()) e.code = code->get<int>();
    for (const char* field : {"message", "error"}) {
      const auto it = j.find(field);
      if (it != j.end() && it->is_string() && !it->get<std::string>().empty()) {
        e.message = it->get<std::string>();
        break;
      }
    }
  }
  if (e.message.empty()) e.message = raw.substr(0, 200);
  return e;
}

// The parts of an error message, appended in one string (the calls sit in retry loops).
template <class... Parts>
std::string concat(const Parts&... parts) {
  std::string text;
  (text.append(parts), ...);
  return text;
}

// The earlier of the call's deadline and the end of one attempt on one member.
Deadline attempt_deadline(const Deadline& deadline, std::chrono::milliseconds attempt_timeout) {
  const Deadline attempt = Deadline::after(attempt_timeout);
  return attempt < deadline ? attempt : deadline;
}

nlohmann::json parse_json(const std::string& text) {
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace

// The members a call could not reach, each with its last error, and when the call gives up.
struct EtcdClient::Failures {
  std::vector<std::string> last;
  Deadline give_up = Deadline::never();
  size_t count = 0;
  std::chrono::milliseconds backoff = kFirstBackoff;

  explicit Failures(size_t members) : last(members) {}

  // Records member's failure; sleeps once every member failed in a row; throws when the
  // client's unreachable_timeout or the call's deadline has passed.
  void record(const EtcdClient& client, size_t member, const std::string& error,
              const Deadline& deadline, const std::string& context) {
    if (count == 0) give_up = Deadline::after(client.options_.unreachable_timeout);
    ++count;
    last[member] = error;
    if (deadline.expired() || give_up.expired()) {
      std::string tried;
      for (size_t i = 0; i < last.size(); ++i) {
        if (last[i].empty()) continue;
        if (!tried.empty()) tried += "; ";
        tried += client.endpoints_[i].url() + " (" + last[i] + ")";
      }
      const std::string text = "etcd " + client.endpoints_text() + ": " + context +
                               ": no member answered; tried " + tried;
      if (deadline.expired()) throw StoreTimeout(text);
      throw StoreError(text);
    }
    if (count % last.size() == 0) {
      std::this_thread::sleep_for(std::min({backoff, deadline.remaining(), give_up.remaining()}));
      backoff = std::min(backoff * 2, kMaxBackoff);
    }
  }
};

EtcdClient::EtcdClient(EtcdClientOptions options) : options_(std::move(options)) {
  if (options_.endpoints.empty()) throw ConfigError("etcd: no endpoint given");
  const bool tls_files = !options_.tls.ca_file.empty() || !options_.tls.cert_file.empty() ||
                         !options_.tls.key_file.empty();
  bool any_tls = false;
  for (const auto& text : options_.endpoints) {
    endpoints_.push_back(parse_etcd_endpoint(text, tls_files));
    any_tls = any_tls || endpoints_.back().tls;
  }
  if (any_tls) tls_ = make_tls_context(options_.tls);
  idle_.resize(endpoints_.size());
  tokens_.resize(endpoints_.size());
}

EtcdClient::~EtcdClient() = default;

std::unique_ptr<HttpConnection> EtcdClient::connect_to(size_t member) const {
  const auto& e = endpoints_[member];
  return std::make_unique<HttpConnection>(e.host, e.port, e.tls ? tls_ : nullptr);
}

std::string EtcdClient::endpoints_text() const {
  std::string out;
  for (const auto& e : endpoints_) {
    if (!out.empty()) out += ',';
    out += e.url();
  }
  return out;
}

std::string EtcdClient::current_endpoint() const {
  return endpoints_[current_.load() % endpoints_.size()].url();
}

std::unique_ptr<HttpConnection> EtcdClient::take(size_t member) {
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    auto& idle = idle_[member];
    while (!idle.empty()) {
      auto conn = std::move(idle.back());
      idle.pop_back();
      if (conn->reusable()) return conn;
    }
  }
  return connect_to(member);
}

void EtcdClient::give_back(size_t member, std::unique_ptr<HttpConnection> conn) {
  std::lock_guard<std::mutex> lock(pool_mu_);
  if (idle_[member].size() < kMaxIdlePerMember) idle_[member].push_back(std::move(conn));
}

size_t EtcdClient::fail_over(size_t member, const std::string& why, bool first) {
  size_t expected = member;
  const size_t next = (member + 1) % endpoints_.size();
  if (current_.compare_exchange_strong(expected, next) && next != member) {
    // One warning per call; the rounds after it (every member failing) are debug lines.
    DDP_LOG(first ? ::ddp::log::Level::kWarn : ::ddp::log::Level::kDebug,
            "etcd: " + endpoints_[member].url() + ": " + why + "; moving on to " +
                endpoints_[next].url());
  }
  return current_.load();
}

std::string EtcdClient::token(size_t member, const Deadline& deadline, const std::string& context) {
  if (options_.username.empty()) return "";
  {
    const std::lock_guard<std::mutex> lock(token_mu_);
    if (!tokens_[member].empty()) return tokens_[member];
  }
  const auto conn = connect_to(member);
  const nlohmann::json body = {{"name", options_.username}, {"password", options_.password}};
  const auto reply = conn->post("/v3/auth/authenticate", body.dump(), deadline);
  const nlohmann::json j = parse_json(reply.body);
  if (reply.status == 200 && j.is_object() && j.contains("token") && j["token"].is_string()) {
    const std::lock_guard<std::mutex> lock(token_mu_);
    tokens_[member] = j["token"].get<std::string>();
    return tokens_[member];
  }
  const EtcdReplyError error = reply_error(j, reply.body);
  if (error.code == kGrpcUnavailable) throw SocketError("etcd: " + error.message);
  throw StoreError(concat("etcd ", endpoints_[member].url(), ": ", context, ": authenticating as '",
                          options_.username, "': ", error.message));
}

void EtcdClient::forget_token(size_t member) {
  const std::lock_guard<std::mutex> lock(token_mu_);
  tokens_[member].clear();
}

nlohmann::json EtcdClient::call(const std::string& path, const nlohmann::json& body,
                                const Deadline& deadline, const std::string& context,
                                bool idempotent) {
  const std::string text = body.dump();
  Failures failures(endpoints_.size());
  bool reauthenticated = false;
  for (;;) {
    const size_t member = current_.load() % endpoints_.size();
    const std::string url = endpoints_[member].url();
    const Deadline attempt = attempt_deadline(deadline, options_.attempt_timeout);
    std::string auth;
    try {
      auth = token(member, attempt, context);
    } catch (const SocketError& e) {  // the request itself was not sent: go elsewhere
      if (deadline.expired()) {
        throw StoreTimeout(concat("etcd ", url, ": ", context,
                                  ": no reply before the deadline (authenticating: ", e.what(),
                                  ")"));
      }
      fail_over(member, e.what(), failures.count == 0);
      failures.record(*this, member, e.what(), deadline, context);
      continue;
    }
    auto conn = take(member);
    HttpConnection::Reply reply;
    try {
      reply = conn->post(path, text, attempt, auth);
    } catch (const SocketTimeout& e) {
      const bool unknown = conn->request_maybe_sent() && !idempotent;
      if (deadline.expired() || !(attempt < deadline)) {
        throw StoreTimeout(concat("etcd ", url, ": ", context, ": no reply before the deadline (",
                                  e.what(), ")",
                                  unknown ? "; whether it took effect is unknown" : ""));
      }
      // The member holds the request without answering (stopped, cut off): the next one.
      const std::string why = std::string(e.what()) + " (no reply within " +
                              std::to_string(options_.attempt_timeout.count()) + " ms)";
      fail_over(member, why, failures.count == 0);
      if (unknown) {
        throw EtcdOutcomeUnknown(
            concat("etcd ", url, ": ", context, ": ", why, "; whether it took effect is unknown"));
      }
      failures.record(*this, member, why, deadline, context);
      continue;
    } catch (const SocketError& e) {
      if (conn->request_maybe_sent() && !idempotent) {
        fail_over(member, e.what(), true);
        throw EtcdOutcomeUnknown(concat("etcd ", url, ": ", context,
                                        ": the connection was lost after the request was sent, "
                                        "so whether it took effect is unknown (",
                                        e.what(), ")"));
      }
      fail_over(member, e.what(), failures.count == 0);
      failures.record(*this, member, e.what(), deadline, context);
      continue;
    }
    give_back(member, std::move(conn));
    nlohmann::json j = parse_json(reply.body);
    if (reply.status == 200 && j.is_object() && !j.contains("error")) return j;
    const EtcdReplyError error = reply_error(j, reply.body);
    if (error.code == kGrpcUnauthenticated && !options_.username.empty() && !reauthenticated) {
      reauthenticated = true;  // refused before it ran: safe to send again with a new token
      forget_token(member);
      continue;
    }
    if (error.code == kGrpcUnavailable) {
      // "no leader": refused before it was proposed. Any other UNAVAILABLE ("request timed
      // out", "leader changed") may come after the proposal, which can still commit.
      fail_over(member, "etcd: " + error.message, failures.count == 0);
      if (!idempotent && error.message.find("no leader") == std::string::npos) {
        throw EtcdOutcomeUnknown(concat("etcd ", url, ": ", context, ": etcd: ", error.message,
                                        " (code ", std::to_string(error.code),
                                        "), so whether it took effect is unknown"));
      }
      failures.record(*this, member, "etcd: " + error.message, deadline, context);
      continue;
    }
    throw StoreError(concat("etcd ", url, ": ", context, ": ", error.message, " (HTTP ",
                            std::to_string(reply.status), ", code ", std::to_string(error.code),
                            ")"));
  }
}

void WatchCancel::cancel() {
  const std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  if (conn_ != nullptr) conn_->interrupt();
}

bool WatchCancel::cancelled() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

void WatchCancel::attach(HttpConnection* conn) {
  const std::lock_guard<std::mutex> lock(mu_);
  conn_ = conn;
  if (cancelled_ && conn_ != nullptr) conn_->interrupt();
}

EtcdClient::WatchResult EtcdClient::watch_for_put(const std::string& key, int64_t start_revision,
                                                  const Deadline& deadline,
                                                  const std::string& context) {
  WatchSpec spec;
  spec.key = key;
  spec.start_revision = start_revision;
  return watch(spec, deadline, context, [](const nlohmann::json& events) {
    for (const auto& event : events) {
      if (event.value("type", std::string("PUT")) == "PUT") return true;
    }
    return false;
  });
}

EtcdClient::WatchResult EtcdClient::watch(
    const WatchSpec& spec, const Deadline& deadline, const std::string& context,
    const std::function<bool(const nlohmann::json& events)>& on_events, WatchCancel* cancel) {
  int64_t revision = spec.start_revision;
  Failures failures(endpoints_.size());
  bool reauthenticated = false;
  nlohmann::json create = {{"key", base64_encode(spec.key)}};
  if (!spec.range_end.empty()) create["range_end"] = base64_encode(spec.range_end);
  if (spec.prev_kv) create["prev_kv"] = true;
  if (spec.no_put) create["filters"] = nlohmann::json::array({"NOPUT"});
  for (;;) {
    if (cancel != nullptr && cancel->cancelled()) return WatchResult::kCancelled;
    const size_t member = current_.load() % endpoints_.size();
    const std::string url = endpoints_[member].url();
    // A connection of its own: a stream stopped half-read cannot carry another request.
    const auto conn_owner = connect_to(member);
    HttpConnection& conn = *conn_owner;
    struct Detach {
      WatchCancel* cancel;
      ~Detach() {
        if (cancel != nullptr) cancel->attach(nullptr);
      }
    } detach{cancel};
    if (cancel != nullptr) cancel->attach(&conn);
    if (revision > 0) create["start_revision"] = std::to_string(revision);
    const nlohmann::json request = {{"create_request", create}};
    std::string lost;
    bool answered = false;  // this stream got a reply: the member is alive
    try {
      const Deadline attempt = attempt_deadline(deadline, options_.attempt_timeout);
      const std::string auth = token(member, attempt, context);
      const unsigned status = conn.open_stream("/v3/watch", request.dump(), attempt, auth);
      for (;;) {
        // A quiet watch is opened again every attempt_timeout: a member that stopped
        // answering then fails to answer the new one, and the watch moves on.
        auto line = conn.next_line(attempt_deadline(deadline, options_.attempt_timeout));
        if (!line) throw SocketError("the watch stream ended");
        if (line->empty()) continue;
        const nlohmann::json j = parse_json(*line);
        if (status != 200 || !j.is_object() || j.contains("error") || !j.contains("result")) {
          const EtcdReplyError error = reply_error(j, *line);
          if (error.code == kGrpcUnavailable) throw SocketError("etcd: " + error.message);
          if (error.code == kGrpcUnauthenticated && !options_.username.empty() &&
              !reauthenticated) {
            reauthenticated = true;
            forget_token(member);
            break;  // open it again on the same member, with a new token
          }
          throw StoreError(concat("etcd ", url, ": ", context, ": watch failed: ", error.message,
                                  " (HTTP ", std::to_string(status), ")"));
        }
        const nlohmann::json& result = j.at("result");
        if (!answered && revision == 0) {
          // From "now": resume after the revision the watch started at.
          revision = json_int(result.value("header", nlohmann::json::object()), "revision") + 1;
        }
        answered = true;
        reauthenticated = false;
        failures = Failures(endpoints_.size());  // this member answers: a later loss is new
        if (json_int(result, "compact_revision") > 0) return WatchResult::kCompacted;
        if (result.value("canceled", false)) {
          throw StoreError(concat("etcd ", url, ": ", context, ": watch canceled: ",
                                  result.value("cancel_reason", std::string("no reason given"))));
        }
        const auto events = result.find("events");
        if (events == result.end() || !events->is_array() || events->empty()) continue;
        for (const auto& event : *events) {
          const auto kv = event.find("kv");
          if (kv != event.end()) revision = std::max(revision, json_int(*kv, "mod_revision") + 1);
        }
        if (on_events(*events)) return WatchResult::kMatched;
      }
      continue;
    } catch (const SocketTimeout& e) {
      if (deadline.expired()) return WatchResult::kTimedOut;
      if (answered) continue;  // quiet, not lost: the same member, from the same revision
      lost = std::string(e.what()) + " (no answer within " +
             std::to_string(options_.attempt_timeout.count()) + " ms)";
    } catch (const SocketError& e) {
      lost = e.what();
    }
    if (cancel != nullptr && cancel->cancelled()) return WatchResult::kCancelled;
    // The member went away (or lost its leader): resume from the last revision seen on the
    // next member, so the events in between are replayed, not missed.
    fail_over(member,
              "watch lost (" + lost + "), resuming from revision " + std::to_string(revision),
              failures.count == 0);
    if (deadline.expired()) return WatchResult::kTimedOut;
    failures.record(*this, member, lost, deadline, context);
  }
}

}  // namespace ddp::rendezvous
