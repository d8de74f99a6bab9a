#pragma once
// A full mesh of plain TCP connections for small collectives. Gloo's ring needs 2(W-1)
// message steps and two thread hand-offs per step; for small buffers latency dominates, so
// every rank instead sends its whole payload to every peer in one step and receives theirs,
// on the calling thread, with non-blocking sockets and poll() (no deadlock whatever the
// buffer sizes, and a deadline on every call). Frames carry a sequence number and a length,
// so ranks issuing different collectives fail with a clear error instead of mixing data.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "rendezvous/store/store.hpp"
#include "worker_runtime/process_group.hpp"

namespace ddp::worker_runtime {

struct DirectMeshOptions {
  int rank = 0;
  int size = 1;
  std::string bind_addr = "127.0.0.1";  // local address to listen on (reachable by peers)
  Duration connect_timeout = std::chrono::seconds(300);
  std::string key_prefix = "direct";  // store keys: <key_prefix>/<rank> = "host port"
};

class DirectMesh {
 public:
  // Listens, publishes its address in store, connects to lower ranks and accepts higher
  // ones. CollectiveError naming the peer, address and errno text on failure or timeout.
  DirectMesh(rendezvous::Store& store, const DirectMeshOptions& options);
  ~DirectMesh();
  DirectMesh(const DirectMesh&) = delete;
  DirectMesh& operator=(const DirectMesh&) = delete;

  // Sends `send` to every peer and receives peer r's payload into recv[r] (recv has size()
  // entries; the own entry is ignored; each span's size is the exact length expected).
  // CollectiveError naming `what`, the peer and the timeout on timeout, lost peer or a
  // frame that does not match (another collective, another length).
  void exchange(std::span<const std::byte> send, const std::vector<std::span<std::byte>>& recv,
                Duration timeout, const std::string& what);

 private:
  int rank_;
  int size_;
  std::vector<int> fds_;  // by peer rank; -1 for self
  uint64_t seq_ = 0;      // frames sent so far (identical on every rank)
};

}  // namespace ddp::worker_runtime
