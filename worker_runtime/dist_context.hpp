#pragma once
// Joining the job ddplaunch (or torchrun, or srun) started: read the env contract, connect
// to the store under /worker/attempt_<restart>, build the process group.
#include <memory>
#include <string>

#include "rendezvous/store/server/store_server.hpp"
#include "rendezvous/store/store.hpp"
#include "worker_runtime/env_contract.hpp"
#include "worker_runtime/process_group.hpp"
#include "worker_runtime/recovery_client.hpp"

namespace ddp::worker_runtime {

struct InitOptions {
  // "auto" (NCCL when the build has CUDA and a GPU is visible, else Gloo), "gloo" or "nccl".
  // DDPLAUNCH_BACKEND overrides it; asking for NCCL without a GPU is a ConfigError.
  std::string backend = "auto";
  // Default deadline of every collective.
  Duration timeout = kDefaultCollectiveTimeout;
  // Deadline of store connect and of the communicator rendezvous.
  Duration store_timeout = std::chrono::seconds(300);
  // The environment to read; empty means the process environment.
  EnvMap env;
  // Gloo: payloads up to this many bytes use the direct mesh (GlooOptions::direct_max_bytes).
  size_t gloo_direct_max_bytes = size_t{4} * 1024 * 1024;
  // Use this store instead of connecting to MASTER_ADDR:MASTER_PORT (tests, embedding).
  std::shared_ptr<rendezvous::Store> store;
};

class DistContext {
 public:
  // server: the store server this rank hosts (rank 0 without an agent store), or null.
  // base_store: the unprefixed store (null: store's own; recover() needs it).
  DistContext(EnvContract env, std::shared_ptr<rendezvous::Store> store,
              std::unique_ptr<ProcessGroup> group,
              std::unique_ptr<rendezvous::StoreServer> server = nullptr,
              std::shared_ptr<rendezvous::Store> base_store = nullptr);
  // Tears down the group; a hosting rank 0 first waits (bounded) for every rank to finish
  // with the store so nobody loses its server mid-call.
  ~DistContext();
  DistContext(const DistContext&) = delete;
  DistContext& operator=(const DistContext&) = delete;

  [[nodiscard]] int rank() const { return env_.rank; }
  [[nodiscard]] int local_rank() const { return env_.local_rank; }
  [[nodiscard]] int world_size() const { return env_.world_size; }
  [[nodiscard]] int local_world_size() const { return env_.local_world_size; }
  [[nodiscard]] int restart_count() const { return env_.restart_count; }
  [[nodiscard]] const std::string& master_addr() const { return env_.master_addr; }
  [[nodiscard]] uint16_t master_port() const { return env_.master_port; }
  [[nodiscard]] const EnvContract& env() const { return env_; }
  // "gloo" or "nccl".
  [[nodiscard]] std::string backend() const { return group_->backend(); }
  // The store, already scoped to this attempt's prefix.
  [[nodiscard]] rendezvous::Store& store() { return *store_; }
  [[nodiscard]] std::shared_ptr<rendezvous::Store> store_ptr() { return store_; }
  [[nodiscard]] ProcessGroup& process_group() { return *group_; }

  // In-place recovery (docs/worker_runtime.md): the agent's channel, and the options the
  // group is rebuilt with. Set by init() when DDPLAUNCH_RECOVERY_FD is set.
  void enable_recovery(std::unique_ptr<RecoveryClient> client, InitOptions options);
  // True when the agent recovers this worker in place (a recovery channel exists).
  [[nodiscard]] bool in_place() const { return recovery_ != nullptr; }
  // The channel (null when not in place).
  [[nodiscard]] RecoveryClient* recovery() { return recovery_.get(); }
  // The rendezvous round the current group belongs to (TORCHELASTIC_RESTART_COUNT at start).
  [[nodiscard]] int64_t round() const { return round_; }
  // After a collective failed in place: waits up to timeout for the agent's round notice
  // (RecoveryError naming it on timeout or when the agent is gone), destroys the old
  // group, reconnects the store when the master moved, builds the group of the new round
  // (store prefix /worker/attempt_<round>) and updates the env values. Returns the notice.
  // CollectiveError at once when another change is announced while the group is built (call
  // it again for the next round). Throws ConfigError when not in place.
  recovery::RoundNotice recover(Duration timeout);

 private:
  void apply(const recovery::RoundNotice& notice);

  std::unique_ptr<rendezvous::StoreServer> server_;  // first: destroyed last
  EnvContract env_;
  std::shared_ptr<rendezvous::Store> store_;
  std::shared_ptr<rendezvous::Store> base_store_;  // unprefixed (recover() re-prefixes it)
  std::unique_ptr<ProcessGroup> group_;
  InitOptions options_;  // what init() was given (recover() builds groups with it)
  int64_t round_ = 0;
  std::unique_ptr<RecoveryClient> recovery_;  // last: its reader stops before the group goes
};

// Reads the env contract, connects to the store and builds the process group.
// Throws ConfigError (bad env/backend), StoreError/StoreTimeout, CollectiveError.
std::unique_ptr<DistContext> init(const InitOptions& options = {});

// The backend init() would pick for options.backend / DDPLAUNCH_BACKEND ("gloo" or "nccl");
// ConfigError for unknown names or "nccl" without CUDA build or GPU.
std::string resolve_backend(const std::string& requested, const std::string& env_override);
// The same decision for a node running local_world_size ranks with visible_gpus devices:
// "auto" takes NCCL only when every local rank can have a GPU of its own.
std::string resolve_backend(const std::string& requested, const std::string& env_override,
                            int local_world_size, int visible_gpus);

// Number of CUDA devices visible (0 in a build without CUDA).
int cuda_device_count();

}  // namespace ddp::worker_runtime
