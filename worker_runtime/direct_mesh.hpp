#pragma once
// A full mesh of plain TCP connections that runs small collectives itself. Gloo's ring needs
// 2(W-1) message steps and two thread hand-offs per step; for small buffers latency
// dominates, so every rank instead sends its whole payload to every peer in one step and
// receives theirs, on the calling thread, with non-blocking sockets and poll() (no deadlock
// whatever the buffer sizes, and a deadline on every call). Frames carry a sequence number
// and a length, so ranks issuing different collectives fail with a clear error instead of
// mixing data. Connections are common/socket_io's SocketConn, with TCP keepalive (an idle link
// to a vanished host fails in about 3 s) but no TCP_USER_TIMEOUT (common/tcp_liveness.hpp).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/socket_io.hpp"
#include "rendezvous/store/store.hpp"
#include "worker_runtime/collective_backend.hpp"

namespace ddp::worker_runtime {

struct DirectMeshOptions {
  int rank = 0;
  int size = 1;
  std::string bind_addr = "127.0.0.1";  // local address to listen on (reachable by peers)
  Duration connect_timeout = std::chrono::seconds(300);
  std::string key_prefix = "direct";  // store keys: <key_prefix>/<rank> = "host port"
};

class DirectMesh final : public CollectiveBackend {
 public:
  // Listens, publishes its address in store, connects to lower ranks and accepts higher
  // ones. CollectiveError naming the peer, address and errno text on failure or timeout.
  DirectMesh(rendezvous::Store& store, const DirectMeshOptions& options);

  // One exchange each; a reduction is computed in rank order (r0 op r1 op ...), so every
  // rank gets the same bits. CollectiveError naming call.what, the peer and the timeout on
  // timeout, a lost peer or a frame that does not match (another collective, another length).
  void all_reduce(void* data, size_t count, DataType type, ReduceOp op,
                  const CollectiveCall& call) override;
  void broadcast(void* data, size_t count, DataType type, int root,
                 const CollectiveCall& call) override;
  void all_gather(const void* send, void* recv, size_t count, DataType type,
                  const CollectiveCall& call) override;
  void barrier(const CollectiveCall& call) override;

  // Shuts down (never closes: another thread may be polling them) every peer socket, so a
  // collective blocked in exchange() fails at once and later ones fail on their first send.
  // Thread-safe: the descriptors never change after construction.
  void abort() noexcept;

 private:
  // Sends `send` to every peer and receives peer r's payload into recv[r] (recv has size_
  // entries; the own entry is ignored; each span's size is the exact length expected).
  void exchange(std::span<const std::byte> send, const std::vector<std::span<std::byte>>& recv,
                Duration timeout, const std::string& what);

  int rank_;
  int size_;
  std::vector<SocketConn> peers_;  // by peer rank; closed for self
  uint64_t seq_ = 0;               // frames sent so far (identical on every rank)
  std::vector<std::byte> slots_;   // every rank's payload of an all_reduce
};

}  // namespace ddp::worker_runtime
