#pragma once
// The project's error hierarchy. Library code throws these (never calls exit());
// async code carries boost::system::error_code and converts at API boundaries.
#include <stdexcept>
#include <string>

namespace ddp {

// Base of every error this project throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a failed connection says about the peer at its other end (docs/multinode.md, "Silence
// or death"). A death is certain and acted on at once; silence proves nothing until the peer
// tolerance has passed.
enum class PeerLoss {
  kUnknown,  // says nothing about the peer: a local error, a bad reply, a deadline of ours
  kDeath,    // its host answered and nothing lives there: closed, reset, refused
  kSilence,  // nothing answered: timed out, unreachable (a cut link, a vanished or frozen host)
};

// The PeerLoss an errno of a socket call means (ECONNRESET: kDeath, ETIMEDOUT: kSilence, ...).
PeerLoss peer_loss_of_errno(int err);
// "death", "silence", "unknown": for events and tests.
const char* peer_loss_name(PeerLoss loss);

// Bad flag, env value or option: names the value and what was expected.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A store operation failed (connection refused/reset, server gone). Names endpoint and keys;
// loss() says what the failure tells of the store's host, when it was the connection's.
class StoreError : public Error {
 public:
  explicit StoreError(const std::string& what, PeerLoss loss = PeerLoss::kUnknown)
      : Error(what), loss_(loss) {}
  [[nodiscard]] PeerLoss loss() const { return loss_; }

 private:
  PeerLoss loss_;
};

// A blocking store call passed its deadline. Names endpoint, keys and timeout.
class StoreTimeout : public StoreError {
 public:
  using StoreError::StoreError;
};

// The store and this client disagree about the job secret (wrong secret, one side without
// one): retrying cannot help. Names the store's address and what to check.
class AuthError : public StoreError {
 public:
  using StoreError::StoreError;
};

// A socket call failed: refused, reset, closed by the peer (common/socket_io.hpp). Names
// the peer and the errno text; callers wrap it into their own error (StoreError, ...), keeping
// loss().
class SocketError : public Error {
 public:
  explicit SocketError(const std::string& what, PeerLoss loss = PeerLoss::kUnknown)
      : Error(what), loss_(loss) {}
  [[nodiscard]] PeerLoss loss() const { return loss_; }

 private:
  PeerLoss loss_;
};

// A socket call passed its deadline.
class SocketTimeout : public SocketError {
 public:
  using SocketError::SocketError;
};

// Bytes on the wire that do not parse (unknown command, oversize length, short frame).
class ProtocolError : public Error {
 public:
  using Error::Error;
};

// Rendezvous could not complete (timeout, closed, too few nodes).
class RendezvousError : public Error {
 public:
  using Error::Error;
};

// Rendezvous was closed because the job ended; late nodes get this.
class RendezvousClosed : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};

// A collective failed or timed out (Gloo/NCCL).
class CollectiveError : public Error {
 public:
  using Error::Error;
};

// A checkpoint file is truncated, corrupt or does not match the model.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

// A dataset file or row is malformed: names file, line and reason.
class DataError : public Error {
 public:
  using Error::Error;
};

// "strerror(errno)" as a std::string, for messages that carry the errno text.
std::string errno_text(int err);

}  // namespace ddp
