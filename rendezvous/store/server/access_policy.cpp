#include "rendezvous/store/server/access_policy.hpp"

#include "rendezvous/store/store.hpp"

namespace ddp::rendezvous {
namespace {

using wire::Command;

// PyTorch's TCPStore client ADDs (and its server side GETs) this unprefixed key when it
// waits for workers (wait_for_workers, the default), so a worker's init_process_group()
// touches it outside any prefix.
const std::string kTorchInitKey = "init/";
// PyTorch >= 2.2's ProcessGroupNCCL polls (CHECK, then GET) and on a timeout SETs its dump
// signal on the store under every PrefixStore (getUnderlyingNonPrefixStore), so the key
// arrives with only TCPStore's "/" before it: "timeout_dump" in 2.2, "exception_dump" since.
// Refusing it would close the worker's one store connection at its first idle second.
const std::string kTorchDumpKeys[] = {"/exception_dump", "/timeout_dump"};

bool torch_global_key(const std::string& key) {
  if (key == kTorchInitKey) return true;
  for (const auto& k : kTorchDumpKeys) {
    if (key == k) return true;
  }
  return false;
}

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

std::optional<std::string> AccessPolicy::refusal(const wire::Request& request) const {
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
    default:
      break;
  }
  const std::string ns = worker_namespace();
  for (const auto& key : request.keys) {
    // PyTorch's TCPStore puts "/" before every key it is given, so a worker's
    // PrefixStore("/worker/attempt_0") key arrives as "//worker/attempt_0/...".
    if (under(key, ns) || (!ns.empty() && key.size() > ns.size() + 1 && key[0] == '/' &&
                           key.compare(1, ns.size(), ns) == 0)) {
      continue;
    }
    if (torch_global_key(key)) continue;
    return std::string(name) + " of key " + quoted(key) + " outside the worker namespace " +
           (ns.empty() ? std::string("(none declared yet)") : quoted(ns)) +
           " without authentication (this store requires the job secret)";
  }
  return std::nullopt;
}

}  // namespace ddp::rendezvous
