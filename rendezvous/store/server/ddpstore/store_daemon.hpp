#pragma once
// The body of the `ddpstore` binary: a StoreServer that runs until SIGINT/SIGTERM, so a
// multi-node job can keep its rendezvous on a host that outlives any agent.
#include <iosfwd>

#include "rendezvous/store/server/store_server.hpp"

namespace ddp::rendezvous {

// Serves until SIGINT or SIGTERM, then stops cleanly. Prints the bound port as the first
// line of out (flushed) so a script can start it with --port 0. Throws StoreError when the
// address cannot be bound.
void run_store_daemon(const StoreServerOptions& options, std::ostream& out);

}  // namespace ddp::rendezvous
