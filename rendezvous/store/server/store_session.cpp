#include "rendezvous/store/server/store_session.hpp"

#include "common/error.hpp"
#include "common/log.hpp"
#include "rendezvous/store/auth.hpp"
#include "rendezvous/store/server/server_limits.hpp"

namespace ddp::rendezvous {
namespace {

// A client that sends requests but does not read the replies stops being read once this
// much is queued for it, so its replies cannot grow the server's memory without bound.
constexpr size_t kMaxQueuedReplyBytes = size_t{16} * 1024 * 1024;

}  // namespace

StoreSession::StoreSession(std::string peer, ServerState& state, const SessionConfig& config,
                           ByteTransport& transport)
    : peer_(std::move(peer)), state_(state), config_(config), transport_(transport) {}

StoreSession::~StoreSession() {
  if (frame_open_) config_.frames->finished(this);
  if (config_.input != nullptr) config_.input->charge(charged_, 0);
}

void StoreSession::received(std::string_view bytes) {
  if (closed_ || close_if_overflowed()) return;
  if (read_paused_) {
    // Arrived before the pause took effect (io_uring's recv is cancelled asynchronously, an
    // epoll hang-up still reads): kept, and run once the replies drain.
    in_.insert(in_.end(), bytes.begin(), bytes.end());
    charge_input();
    return;
  }
  bool progress = false;
  if (in_begin_ == in_.size()) {
    // Nothing buffered (the usual case: whole requests per read): parse straight from the
    // backend's buffer and keep only what is left of an incomplete frame.
    clear_buffer(in_);
    in_begin_ = 0;
    const size_t used = process(bytes);
    if (closed_) return;
    progress = used > 0;
    in_.assign(bytes.begin() + static_cast<std::ptrdiff_t>(used), bytes.end());
  } else {
    // The rest of a frame: the buffer grows by what actually arrives, never by what the
    // frame claims, so a forged length costs nothing.
    in_.insert(in_.end(), bytes.begin(), bytes.end());
    const size_t used = process(std::string_view(in_.data() + in_begin_, in_.size() - in_begin_));
    if (closed_) return;
    progress = used > 0;
    in_begin_ += used;
    in_.erase(in_.begin(), in_.begin() + static_cast<std::ptrdiff_t>(in_begin_));
    in_begin_ = 0;
  }
  catch_up();
  if (closed_) return;
  if (in_.size() - in_begin_ > config_.max_request_bytes) {
    close("request refused: more than " + std::to_string(config_.max_request_bytes) +
          " bytes of one request arrived, more than the store may hold " + limit_bytes_text());
    return;
  }
  if (!charge_input()) return;
  track_frame(progress);
}

bool StoreSession::charge_input() {
  if (config_.input == nullptr) return true;
  const size_t now = closed_ ? 0 : in_.size() - in_begin_;
  const bool fits = config_.input->charge(charged_, now);
  charged_ = now;
  if (!fits) {
    close("request refused: " + std::to_string(config_.input->held()) +
          " bytes of requests still arriving on all connections, over the limit of " +
          std::to_string(config_.input->max_bytes()) + " " + limit_bytes_text());
    return false;
  }
  return true;
}

void StoreSession::catch_up() {
  // Requests left in in_ because replies backed up run while the queue is below the limit
  // (the transport may have sent them meanwhile); otherwise reading pauses until drained().
  while (backed_up_ && !closed_ && transport_.queued_bytes() <= kMaxQueuedReplyBytes) {
    in_begin_ += process(std::string_view(in_.data() + in_begin_, in_.size() - in_begin_));
  }
  if (closed_) return;
  in_.erase(in_.begin(), in_.begin() + static_cast<std::ptrdiff_t>(in_begin_));
  in_begin_ = 0;
  if (!read_paused_ && (backed_up_ || transport_.queued_bytes() > kMaxQueuedReplyBytes)) {
    read_paused_ = true;  // resumed by drained() once the client catches up
    transport_.set_reading(false);
  }
}

void StoreSession::track_frame(bool progress) {
  if (config_.frames == nullptr) return;
  const bool open = !closed_ && !read_paused_ && !draining_ && in_.size() > in_begin_;
  if (open && (!frame_open_ || progress)) {
    config_.frames->started(this, FrameDeadlines::Clock::now());
  } else if (!open && frame_open_) {
    config_.frames->finished(this);
  }
  frame_open_ = open;
}

void StoreSession::frame_timed_out(std::chrono::milliseconds timeout) {
  if (close_if_overflowed()) return;
  close("slow client: " + std::to_string(in_.size() - in_begin_) + " bytes of a request (" +
        (dialect_ == wire::Dialect::kUnknown ? std::string("the handshake")
                                             : std::string("a frame")) +
        ") have waited " + std::to_string(timeout.count()) + " ms for the rest " +
        limit_frame_timeout_text());
}

void StoreSession::read_ended(int err) {
  if (closed_ || close_if_overflowed()) return;
  if (draining_) {  // the end of stream was seen already; only a reset changes anything
    if (err != 0)
      close("connection lost while replies were still going out (" + errno_text(err) + ")");
    return;
  }
  if (err == 0 && read_paused_) {
    eof_pending_ = true;  // requests may still wait in in_: the end counts once they ran
    return;
  }
  const std::string what = err == 0 ? std::string("end of stream") : errno_text(err);
  const size_t buffered = in_.size() - in_begin_;
  if (!server_nonce_.empty() && !authenticated_) {
    close("left after AUTH_CHALLENGE without proving the job secret (" + what +
          "): a client without the secret (--secret_file / DDPLAUNCH_SECRET_FILE)?");
  } else if (state_.waiting(*this) && err == 0) {
    // A client that closes while it waits is going away (an agent whose job ended leaves its
    // watchers' waits behind): normal, not an alarm. A reset still is one (below).
    DDP_LOG_DEBUG("connection from " + peer_ + " ended during a wait (end of stream)");
    close("");
  } else if (state_.waiting(*this)) {
    close("connection lost in the middle of a wait (" + what + ")");
  } else if (buffered > 0) {
    close("truncated frame: connection ended (" + what + ") with " + std::to_string(buffered) +
          " bytes of an incomplete request");
  } else if (err == 0 && transport_.queued_bytes() > 0) {
    // A client that shut only its write side (nc -N, a script) still reads: its replies go
    // out first, then the connection closes.
    draining_ = true;
    transport_.set_reading(false);
  } else if (err == 0) {
    close("");  // a client that is done; not worth a log line
  } else {
    close("read failed: " + what);
  }
}

void StoreSession::failed(const std::string& reason) {
  close(reason);
}

void StoreSession::drained() {
  if (closed_ || close_if_overflowed()) return;
  if (draining_) {
    close("");
    return;
  }
  if (!read_paused_) return;
  read_paused_ = false;
  catch_up();  // may pause again: the requests kept back asked for more than the limit
  if (closed_) return;
  charge_input();  // in_ only shrank: this never fails
  if (read_paused_) return;
  if (eof_pending_) {
    eof_pending_ = false;
    read_ended(0);
    return;
  }
  transport_.set_reading(true);
  track_frame(true);  // the clock restarts: the client was not read meanwhile
}

void StoreSession::stop() {
  // The server stops: nobody died, so connection-bound records are not carried out.
  if (closed_) return;
  closed_ = true;
  track_frame(false);
  charge_input();
  state_.disconnect(*this, /*run_close_actions=*/false);
  transport_.close();
}

size_t StoreSession::process(std::string_view data) {
  // Replies of every request in this batch go out in one flush (send() only queues).
  batching_ = true;
  backed_up_ = false;
  size_t used = 0;
  while (!closed_) {
    const std::string_view rest = data.substr(used);
    if (rest.empty() || rest.size() < needed_) break;
    if (transport_.queued_bytes() > kMaxQueuedReplyBytes) {
      // Back-pressure per request, not per read: one read of small requests for a large
      // value would otherwise queue hundreds of MiB of replies.
      backed_up_ = true;
      break;
    }
    if (dialect_ == wire::Dialect::kUnknown) {
      const auto detected = wire::detect_dialect(rest);
      if (detected.status == wire::ParseStatus::kNeedMore) {
        needed_ = wire::kHandshakeBytes;
        break;
      }
      dialect_ = detected.dialect;
      used += detected.consumed;
      needed_ = 0;  // the hint was the handshake's; a request may be shorter (GETNUMKEYS: 1)
      continue;
    }
    if (dialect_ == wire::Dialect::kLegacy) refine_legacy(rest);
    auto parsed = wire::parse_request(rest, dialect_, config_.limits);
    if (parsed.status == wire::ParseStatus::kNeedMore) {
      needed_ = parsed.needed;
      break;
    }
    if (parsed.status == wire::ParseStatus::kBad) {
      close("bad request: " + parsed.error);
      break;
    }
    used += parsed.consumed;
    needed_ = 0;
    if (legacy_role_ == wire::LegacyRole::kFresh && dialect_ == wire::Dialect::kLegacy) {
      legacy_role_ = parsed.request.command == wire::Command::kWatchKey ? wire::LegacyRole::kWatch
                                                                        : wire::LegacyRole::kMain;
    }
    if (negotiates_extension(parsed.request)) continue;
    scope_keys(parsed.request);
    if (!authenticated_ && config_.access != nullptr) {
      if (auto why = config_.access->refusal(parsed.request, !scope_.empty())) {
        close("refused: " + *why);
        break;
      }
    }
    try {
      if (authenticates(parsed.request)) continue;
      state_.execute(shared_from_this(), std::move(parsed.request));
    } catch (const Error& e) {
      close(std::string("request refused: ") + e.what());
    }
  }
  batching_ = false;
  if (!closed_) transport_.flush();
  return used;
}

void StoreSession::refine_legacy(std::string_view bytes) {
  if (legacy_role_ == wire::LegacyRole::kWatch) return;  // a watch connection sends only WATCH_KEY
  // kNeedMore: the parser says whether the frame is incomplete or bad.
  const auto refined = wire::refine_legacy(bytes, legacy_role_);
  if (refined.status == wire::ParseStatus::kComplete) dialect_ = refined.dialect;
}

void StoreSession::scope_keys(wire::Request& request) {
  if (authenticated_ || dialect_ == wire::Dialect::kNative || config_.access == nullptr) return;
  if (!scope_fixed_) {
    if (request.keys.empty()) return;  // VALIDATE, PING, GETNUMKEYS... pin nothing yet
    scope_ = config_.access->worker_namespace();
    scope_fixed_ = true;
  }
  if (scope_.empty()) return;
  for (auto& key : request.keys) key.insert(0, scope_);
}

bool StoreSession::negotiates_extension(const wire::Request& request) {
  if (dialect_ != wire::Dialect::kV2 || request.command != wire::Command::kCheck ||
      request.keys.size() != 1 || request.keys[0] != wire::kExtensionProbeKey) {
    return false;
  }
  dialect_ = wire::Dialect::kNative;
  // Keepalive and TCP_USER_TIMEOUT only where the client is ours: a PyTorch client never
  // reconnects, so a close on a network blip would kill its worker.
  transport_.enable_liveness();
  std::string out;
  wire::put_u8(out, wire::kCheckReady);
  send(out);
  return true;
}

bool StoreSession::authenticates(const wire::Request& request) {
  using wire::Command;
  const bool has_secret = config_.access != nullptr && config_.access->requires_auth();
  std::string out;
  switch (request.command) {
    case Command::kAuthChallenge:
      if (!has_secret) {
        wire::put_u8(out, wire::kAuthNotRequired);
        wire::put_string(out, "");
        break;
      }
      server_nonce_ = auth::random_nonce();
      wire::put_u8(out, wire::kAuthRequired);
      wire::put_string(out, server_nonce_);
      break;
    case Command::kAuthProof: {
      if (!has_secret) {
        close(
            "refused authentication: the client has a secret but this store has none (started "
            "without --secret_file?)");
        return true;
      }
      if (server_nonce_.empty()) {
        close("AUTH_PROOF without an AUTH_CHALLENGE before it");
        return true;
      }
      const std::string server_nonce = std::move(server_nonce_);
      server_nonce_.clear();  // one proof per challenge
      const std::string& client_nonce = request.keys[0];
      const std::string& secret = config_.access->secret();
      if (client_nonce.size() != auth::kNonceBytes ||
          !auth::same_mac(request.values[0],
                          auth::client_proof(secret, server_nonce, client_nonce))) {
        close("refused authentication: wrong secret (the proof does not match)");
        return true;
      }
      authenticated_ = true;
      wire::put_u8(out, wire::kAuthAccepted);
      wire::put_string(out, auth::server_proof(secret, server_nonce, client_nonce));
      break;
    }
    case Command::kWorkerNamespace:
      if (config_.access != nullptr) config_.access->set_worker_namespace(request.keys[0]);
      wire::put_u8(out, wire::kCloseActionDone);
      break;
    default:
      return false;
  }
  send(out);
  return true;
}

void StoreSession::send(std::string_view bytes) {
  if (closed_ || overflowed_) return;
  if (!batching_ && transport_.queued_bytes() > kMaxQueuedReplyBytes) {
    // Pushed by another connection's request to a client that does not read: queued, these
    // would grow without bound (a watcher of a key somebody keeps setting). Its own requests
    // are held back by back-pressure instead (process()).
    overflowed_ = true;
    if (config_.frames != nullptr) {  // the next sweep closes it, if nothing else does first
      config_.frames->expire(this);
      frame_open_ = true;
    }
    return;
  }
  transport_.write(bytes);
  if (!batching_) transport_.flush();
}

bool StoreSession::close_if_overflowed() {
  if (!overflowed_ || closed_) return false;
  close("not reading its replies: more than " + std::to_string(kMaxQueuedReplyBytes) +
        " bytes were queued for it when another connection's request had one more (a watch "
        "notification or a wait's answer)");
  return true;
}

void StoreSession::close(const std::string& reason) {
  if (closed_) return;
  closed_ = true;
  track_frame(false);
  charge_input();
  state_.disconnect(*this);
  if (!reason.empty()) {
    DDP_LOG_WARN("closing connection from " + peer_ + ": " + reason);
  }
  transport_.close();
}

}  // namespace ddp::rendezvous
