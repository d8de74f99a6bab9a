#pragma once
// Who may do what on a store server (docs/security.md): with a job secret, a connection that
// proved it (AUTH_PROOF) may do anything; any other connection, PyTorch's among them, is
// confined to the worker namespace of the job's current attempt, which an authenticated
// agent declares (WORKER_NAMESPACE) or the hosting agent sets directly. Without a secret
// everything is open, as before. Thread-safe: the hosting agent sets the namespace from its
// own thread while the server's loop reads it.
#include <mutex>
#include <optional>
#include <string>

#include "rendezvous/store/wire_codec.hpp"

namespace ddp::rendezvous {

class AccessPolicy {
 public:
  // secret empty: no authentication, nothing confined.
  explicit AccessPolicy(std::string secret = {}) : secret_(std::move(secret)) {}

  [[nodiscard]] bool requires_auth() const { return !secret_.empty(); }
  [[nodiscard]] const std::string& secret() const { return secret_; }

  // Unauthenticated connections may use keys under prefix from now on (the previous
  // attempt's namespace is out of reach). A prefix without a trailing '/' gets one.
  void set_worker_namespace(std::string prefix);
  [[nodiscard]] std::string worker_namespace() const;

  // Why an unauthenticated connection may not make request ("SET of key '/rdzv/x' outside
  // the worker namespace '/worker/attempt_0/'"); nullopt when it may. Always nullopt
  // without a secret.
  [[nodiscard]] std::optional<std::string> refusal(const wire::Request& request) const;

 private:
  const std::string secret_;
  mutable std::mutex mu_;
  std::string namespace_;  // empty: none declared yet
};

}  // namespace ddp::rendezvous
