#pragma once
// ProcessGroup over Gloo's TCP transport. Rendezvous goes through our Store (adapter to
// gloo::rendezvous::Store); the transport binds the local address that routes to MASTER_ADDR.
// Gloo collectives block, so async collectives run on one communication thread, in issue
// order; a blocking call runs inline when that thread is idle.
// Two backends (collective_backend.hpp), chosen per call in one place (Impl::pick): a
// collective whose payload times (size - 1) peers is at most direct_max_bytes runs on the
// DirectMesh (direct_mesh.hpp) in one step and never touches Gloo; larger ones use Gloo's
// own algorithms. Every rank picks the same one: the choice depends only on the byte count.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "rendezvous/store/store.hpp"
#include "worker_runtime/process_group.hpp"

namespace ddp::worker_runtime {

struct GlooOptions {
  int rank = 0;
  int size = 1;
  // Default collective deadline.
  Duration timeout = kDefaultCollectiveTimeout;
  // Deadline for every rank to publish its address and connect.
  Duration connect_timeout = std::chrono::seconds(300);
  // Local address for the transport; empty: the one that routes to route_to.
  std::string bind_addr;
  // Host used to choose the interface (MASTER_ADDR).
  std::string route_to = "127.0.0.1";
  // Store key prefix of this group's rendezvous (distinct per group sharing one store).
  std::string store_prefix = "gloo";
  // Collectives whose payload times (size - 1) peers is at most this many bytes skip Gloo's
  // ring and go over a direct mesh in one step (see direct_mesh.hpp); 0 disables the mesh.
  // 4 MiB: where the ring started to win on the development machine (2 ranks, loopback).
  size_t direct_max_bytes = size_t{4} * 1024 * 1024;
};

class GlooProcessGroup final : public ProcessGroup {
 public:
  // Connects the full mesh through store (keys under "gloo/"); throws CollectiveError
  // naming the rank and the store on failure or timeout.
  GlooProcessGroup(const std::shared_ptr<rendezvous::Store>& store, const GlooOptions& options);
  ~GlooProcessGroup() override;

  [[nodiscard]] std::string backend() const override { return "gloo"; }
  // Signals an error on every Gloo pair (waking local waiters, which close() alone does not)
  // and shuts down every direct-mesh socket; later collectives are refused.
  void abort(const std::string& why) override;

 protected:
  std::unique_ptr<Work> do_all_reduce(void* data, size_t count, DataType type, ReduceOp op,
                                      Duration timeout) override;
  void do_all_reduce_blocking(void* data, size_t count, DataType type, ReduceOp op,
                              Duration timeout) override;
  std::unique_ptr<Work> do_all_reduce_coalesced(std::vector<std::span<float>> buffers, ReduceOp op,
                                                Duration timeout) override;
  void do_broadcast(void* data, size_t count, DataType type, int root, Duration timeout) override;
  void do_all_gather(const void* send, void* recv, size_t count, DataType type,
                     Duration timeout) override;
  void do_barrier(Duration timeout) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The local IPv4/IPv6 address the kernel would use to reach host (a UDP connect, no packet
// sent). ConfigError when host does not resolve.
std::string local_address_for(const std::string& host);

}  // namespace ddp::worker_runtime
