#pragma once
// The one place that decides how a store this agent hosts is set up: where it listens (so the
// clients dialling its address reach it and, where possible, nothing else does), the address
// its clients are told, and how the workers' namespace of an attempt is declared on the store
// they use. The single-node store, a multi-node job's rendezvous store and the workers' store
// beside an etcd rendezvous all go through it (docs/security.md, docs/store.md).
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "rendezvous/rendezvous_handler.hpp"
#include "rendezvous/store/server/store_server.hpp"

namespace ddp::launcher {

// Who must reach the store.
enum class StoreReach {
  kThisMachine,  // one node: its workers only, so loopback
  kOtherNodes,   // the other nodes (multi-node rendezvous store, the workers' store)
};

struct StoreHostingOptions {
  StoreReach reach = StoreReach::kThisMachine;
  std::string dial_host;            // the address its clients were told to dial (normalized)
  std::string local_addr;           // --local_addr, normalized ("" when not given)
  std::optional<std::string> bind;  // --store_bind
  uint16_t port = 0;                // 0: a free port
  std::string secret;               // the job secret ("" = open store)
  std::string name = "the store";   // for the log line: "the workers' store"
};

// Where to listen and what to say about it.
struct StoreListen {
  std::string host;   // what the server binds (kAnyHost: every interface)
  std::string dial;   // what its clients dial (MASTER_ADDR): dial_host, or the loopback
                      // address a single-node store listens on instead
  std::string note;   // one line for the log ("" when there is nothing to say)
  bool warn = false;  // note is a warning (every interface), not information
};

// The choice, without binding anything: --store_bind when given; else one node's loopback
// (loopback_for), telling when that changes what workers dial; else store_listen_host (the
// address dialled, or --local_addr, when it is this machine's; else every interface, said in
// a warning). ConfigError when an IPv6 address is dialled on a machine without IPv6
// (have_ipv6).
StoreListen choose_store_listen(const StoreHostingOptions& options, bool have_ipv6);

// A store hosted as chosen (the note logged): the server, bound and serving, and the address
// its clients dial. Throws as choose_store_listen, and BindError when it cannot listen.
struct HostedStore {
  std::unique_ptr<rendezvous::StoreServer> server;
  std::string dial;
};
HostedStore host_store(const StoreHostingOptions& options);

// How the agent declares the namespace of the attempt it spawns ("/worker/attempt_3/"), which
// scopes its PyTorch workers' keys: directly on served when this agent serves the store the
// workers use (non-null), else over a connection of its own from connect (authenticated when
// there is a secret; a store without ddplaunch's dialect ignores it). Neither: a no-op.
// Without a secret too: it is what keeps one attempt's keys from the next (docs/store.md,
// "Attempt scopes").
void declare_worker_namespace(rendezvous::StoreServer* served,
                              const rendezvous::StoreConnector& connect, const std::string& prefix);
// The same as a setter for RendezvousSetup::set_worker_namespace (served must outlive it).
std::function<void(const std::string&)> worker_namespace_setter(rendezvous::StoreServer* served,
                                                                rendezvous::StoreConnector connect);

}  // namespace ddp::launcher
