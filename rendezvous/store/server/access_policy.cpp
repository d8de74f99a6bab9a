#include "rendezvous/store/server/access_policy.hpp"

#include "rendezvous/store/store.hpp"

namespace ddp::rendezvous {
namespace {

using wire::Command;

std::string quoted(const std::string& key) {
  return join_keys({key});
}

bool under(const std::string& key, const std::string& prefix) {
  return !prefix.empty() && key.size() > prefix.size() &&
         key.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

void AccessPolicy::set_worker_namespace(std::string prefix) {
  if (prefix.empty() || prefix.back() != '/') prefix.push_back('/');
  std::lock_guard<std::mutex> lock(mu_);
  namespace_ = std::move(prefix);
}

std::string AccessPolicy::worker_namespace() const {
  std::lock_guard<std::mutex> lock(mu_);
  return namespace_;
}

std::optional<std::string> AccessPolicy::refusal(const wire::Request& request, bool scoped) const {
  if (!requires_auth()) return std::nullopt;
  const char* name = wire::command_name(request.command);
  switch (request.command) {
    case Command::kValidate:
    case Command::kPing:
    case Command::kGetNumKeys:
    case Command::kCancelWait:
    case Command::kAuthChallenge:
    case Command::kAuthProof:
      return std::nullopt;
    case Command::kOnClose:
    case Command::kEphemeral:
    case Command::kClearCloseActions:
    case Command::kWorkerNamespace:
      return std::string(name) + " without authentication (this store requires the job secret)";
    case Command::kListKeys:  // would name every key of the store
      if (scoped) return std::nullopt;
      return std::string(name) + " outside a worker namespace without authentication (this " +
             "store requires the job secret)";
    default:
      break;
  }
  if (scoped) return std::nullopt;  // its keys were put under its attempt's namespace
  const std::string ns = worker_namespace();
  for (const auto& key : request.keys) {
    if (under(key, ns)) continue;
    return std::string(name) + " of key " + quoted(key) + " outside the worker namespace " +
           (ns.empty() ? std::string("(none declared yet)") : quoted(ns)) +
           " without authentication (this store requires the job secret)";
  }
  return std::nullopt;
}

}  // namespace ddp::rendezvous
