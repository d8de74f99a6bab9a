#include "rendezvous/local_rendezvous.hpp"

#include "common/error.hpp"

namespace ddp::rendezvous {

RendezvousInfo LocalRendezvous::next_rendezvous() {
  if (closed_) {
    throw RendezvousClosed("rendezvous of run '" + options_.run_id +
                           "' was already shut down (the job ended)");
  }
  RendezvousInfo info;
  info.round = round_++;
  info.group_rank = 0;
  info.group_world_size = 1;
  info.rank_offset = 0;
  info.world_size = options_.nproc_per_node;
  info.master_addr = options_.master_addr;
  info.master_port = options_.master_port;
  return info;
}

void LocalRendezvous::watch(std::function<void(MembershipChange)> /*on_change*/) {}

}  // namespace ddp::rendezvous
