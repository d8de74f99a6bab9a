#pragma once
// What a rendezvous set-up hands the agent: the store server it hosts (if any), the handler
// it drives, and what its workers are told. Made by make_rendezvous (rendezvous_factory.hpp)
// or, for etcd, by make_etcd_rendezvous (etcd_setup.hpp); its own header so that neither
// includes the other.
#include <functional>
#include <memory>
#include <string>

#include "rendezvous/rendezvous_handler.hpp"
#include "rendezvous/store/server/store_server.hpp"

namespace ddp::launcher {

struct RendezvousSetup {
  std::unique_ptr<rendezvous::StoreServer> store_server;  // null when this agent hosts none
  // This agent's standby store (store_succession.hpp): empty and listening, the rendezvous
  // store's successor should the node hosting it be lost. Null where the store cannot move.
  std::unique_ptr<rendezvous::StoreServer> standby_server;
  std::unique_ptr<rendezvous::RendezvousHandler> handler;
  std::string run_id;                    // TORCHELASTIC_RUN_ID
  bool workers_use_agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE
  // The job secret (docs/security.md): from --secret_file / DDPLAUNCH_SECRET_FILE, or made
  // fresh for a one-node job; empty: the store is open. Workers get it as DDPLAUNCH_SECRET.
  std::string secret;
  // Declares the worker namespace ("/worker/attempt_3/") that PyTorch store clients opened
  // from now on are scoped to (docs/store.md, "Attempt scopes"). May block (a connection to
  // the store).
  std::function<void(const std::string&)> set_worker_namespace;
};

}  // namespace ddp::launcher
