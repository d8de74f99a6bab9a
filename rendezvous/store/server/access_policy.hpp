#pragma once
// Who may do what on a store server (docs/security.md). With a job secret, a connection that
// proved it (AUTH_PROOF) may do anything. A PyTorch connection is scoped (StoreSession):
// every key it names is stored under the worker namespace of the attempt it connected in,
// which an authenticated agent declares (WORKER_NAMESPACE) or the hosting agent sets
// directly, so it reaches nothing else; before any namespace is declared it is refused. A
// native connection without the secret may only name keys under the current namespace.
// Without a secret nothing is refused; PyTorch connections are still scoped once a
// namespace is declared, so attempts stay apart. Thread-safe: the hosting agent sets the
// namespace from its own thread while the server's loop reads it.
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

  // PyTorch connections opened from now on are scoped to prefix, native ones without the
  // secret confined to it (the previous attempt's namespace is out of reach). A prefix
  // without a trailing '/' gets one.
  void set_worker_namespace(std::string prefix);
  [[nodiscard]] std::string worker_namespace() const;

  // Why an unauthenticated connection may not make request ("SET of key '/rdzv/x' outside
  // the worker namespace '/worker/attempt_0/'"); nullopt when it may. scoped: its keys were
  // put under a namespace already, so only ddplaunch's own commands are refused. Always
  // nullopt without a secret.
  [[nodiscard]] std::optional<std::string> refusal(const wire::Request& request, bool scoped) const;

 private:
  const std::string secret_;
  mutable std::mutex mu_;
  std::string namespace_;  // empty: none declared yet
};

}  // namespace ddp::rendezvous
