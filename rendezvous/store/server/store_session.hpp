#pragma once
// One client connection of the store server, apart from its socket: lets the pure codec cut
// the bytes that arrive into requests, hands those to ServerState, and queues the replies on
// its transport. Which I/O backend moves the bytes (epoll or io_uring) is the transport's
// business. Lives on the server's loop thread.
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/store/server/access_policy.hpp"
#include "rendezvous/store/server/byte_transport.hpp"
#include "rendezvous/store/server/frame_deadlines.hpp"
#include "rendezvous/store/server/input_budget.hpp"
#include "rendezvous/store/server/server_state.hpp"
#include "rendezvous/store/wire_codec.hpp"

namespace ddp::rendezvous {

// What every session of one server shares: the limits, the slow-loris clock, and who may
// do what.
struct SessionConfig {
  wire::Limits limits;
  FrameDeadlines* frames = nullptr;  // null: incomplete frames never time out
  // A request still arriving past this many bytes closes the connection: it holds more than
  // the store may (ServerLimits::max_bytes), so it could never succeed.
  size_t max_request_bytes = std::numeric_limits<size_t>::max();
  InputBudget* input = nullptr;    // null: buffered input of all sessions is not capped
  AccessPolicy* access = nullptr;  // null: no secret, nothing confined
};

class StoreSession final : public ReplyChannel, public std::enable_shared_from_this<StoreSession> {
 public:
  // transport must outlive the session's calls into it (the backend owns both).
  StoreSession(std::string peer, ServerState& state, const SessionConfig& config,
               ByteTransport& transport);
  ~StoreSession() override;
  StoreSession(const StoreSession&) = delete;
  StoreSession& operator=(const StoreSession&) = delete;

  // Bytes from the socket, in order: runs every complete request, keeps only the rest of an
  // incomplete frame (a connection holds bytes of its own only then). A bad frame closes.
  void received(std::string_view bytes);
  // The read side ended: err 0 is end of stream, otherwise the errno. Closes, with a log
  // line unless a client that was done simply left; at the end of a stream whose replies
  // are still queued, once they are sent.
  void read_ended(int err);
  // The transport failed ("write failed: Broken pipe"): closes with that as the log line.
  void failed(const std::string& reason);
  // Every queued reply went out: reading resumes if back-pressure had stopped it, or the
  // connection closes if the client's stream had ended.
  void drained();
  // Server shutdown: closes without a log line.
  void stop();
  // Part of a request has waited longer than timeout for the rest (FrameDeadlines): closes.
  void frame_timed_out(std::chrono::milliseconds timeout);
  [[nodiscard]] bool closed() const { return closed_; }

  void send(std::string_view bytes) override;
  [[nodiscard]] const std::string& peer() const override { return peer_; }
  [[nodiscard]] std::string_view key_scope() const override { return scope_; }

 private:
  // Parses and executes every complete request in data; returns the bytes used (the rest is
  // an incomplete frame). Check closed_ afterwards.
  size_t process(std::string_view data);
  // A 2.x client's CHECK of wire::kExtensionProbeKey: answered "ready" and the connection
  // speaks kNative from now on. False for any other request.
  bool negotiates_extension(const wire::Request& request);
  // Runs the requests back-pressure left in in_ while the reply queue allows, and pauses
  // reading when it does not.
  void catch_up();
  // Charges the input buffered now to config_.input; closes the session (and returns false)
  // when that takes every session's buffered input past the budget.
  bool charge_input();
  // Tells FrameDeadlines whether part of a request is waiting for the rest while the
  // connection is read; progress (a request completed) restarts the clock.
  void track_frame(bool progress);
  // A kLegacy connection's request at the front of bytes may show it is 2.1's
  // (wire::refine_legacy); its role is learnt from its first request.
  void refine_legacy(std::string_view bytes);
  // A PyTorch connection (no secret proven, not kNative) is pinned, at its first request that
  // names a key, to the worker namespace declared then; every key it names is stored under it
  // from then on (docs/store.md, "Attempt scopes").
  void scope_keys(wire::Request& request);
  // AUTH_CHALLENGE, AUTH_PROOF and WORKER_NAMESPACE, answered here (AccessPolicy); false
  // for any other request. Check closed_ afterwards.
  bool authenticates(const wire::Request& request);
  // overflowed_: closes (true), naming why. Only from this session's own events.
  bool close_if_overflowed();
  // Closes the connection; reason non-empty -> exactly one log line naming the peer.
  void close(const std::string& reason);

  std::string peer_;
  ServerState& state_;
  const SessionConfig& config_;
  ByteTransport& transport_;
  wire::Dialect dialect_ = wire::Dialect::kUnknown;
  wire::LegacyRole legacy_role_ = wire::LegacyRole::kFresh;
  bool scope_fixed_ = false;  // scope_ was decided (it may be empty: nothing is scoped)
  std::string scope_;

  std::vector<char> in_;  // bytes of an incomplete frame: in_[in_begin_, end)
  size_t in_begin_ = 0;
  size_t needed_ = 0;         // the codec's hint: don't parse again before this many bytes
  bool batching_ = false;     // inside process(): replies wait for one flush at its end
  bool read_paused_ = false;  // too many replies queued: not reading until they drain
  bool draining_ = false;     // the client's stream ended: closing once the replies are out
  bool backed_up_ = false;    // process() stopped at the reply limit: in_ holds requests
  bool eof_pending_ = false;  // the stream ended while paused: handled once caught up
  bool frame_open_ = false;   // registered with config_.frames
  size_t charged_ = 0;        // bytes of in_ charged to config_.input
  bool closed_ = false;
  bool authenticated_ = false;  // AUTH_PROOF matched: nothing is confined
  // A reply pushed by another connection's request (a watch notification, a parked wait's
  // answer) found this client's queue over the limit: it gets no more and closes at its next
  // event or sweep (close() cannot run inside the other request).
  bool overflowed_ = false;
  std::string server_nonce_;  // of the last AUTH_CHALLENGE, until its proof arrives
};

}  // namespace ddp::rendezvous
