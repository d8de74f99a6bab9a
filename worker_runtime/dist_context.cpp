#include "worker_runtime/dist_context.hpp"

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "common/host_address.hpp"
#include "common/log.hpp"
#include "common/progress_protocol.hpp"
#include "rendezvous/store/memory_store.hpp"
#include "rendezvous/store/prefix_store.hpp"
#include "rendezvous/store/tcp_store.hpp"
#include "worker_runtime/crash_backtrace.hpp"
#include "worker_runtime/gloo_process_group.hpp"
#ifdef DDP_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "worker_runtime/nccl_process_group.hpp"
#endif

namespace ddp::worker_runtime {
namespace {

// Key every rank adds to when it is done with the store; a hosting rank 0 waits for it.
constexpr const char* kShutdownKey = "runtime/shutdown";           // ADD: ranks that left
constexpr const char* kShutdownDoneKey = "runtime/shutdown_done";  // set by the last one
constexpr Duration kShutdownWait = std::chrono::seconds(30);

std::shared_ptr<rendezvous::Store> connect_store(const EnvContract& env, const InitOptions& options,
                                                 std::unique_ptr<rendezvous::StoreServer>& server) {
  if (options.store) {
    return options.store;
  }
  if (env.world_size == 1 && !env.use_agent_store) {
    return std::make_shared<rendezvous::MemoryStore>(options.store_timeout);  // alone: no sockets
  }
  if (env.rank == 0 && !env.use_agent_store) {
    rendezvous::StoreServerOptions server_options;
    server_options.port = env.master_port;
    // Listen where the other ranks connect (MASTER_ADDR, when it is this machine's), not on
    // every interface unless nothing narrower is known (common/host_address.hpp).
    std::string why;
    server_options.host = store_listen_host(env.master_addr, "", why);
    if (!why.empty()) DDP_LOG_WARN("the store listens on every interface: " + why);
    server_options.secret = env.secret;
    server = std::make_unique<rendezvous::StoreServer>(server_options);
  }
  rendezvous::TcpStoreOptions tcp;
  tcp.host = env.master_addr;
  tcp.port = env.master_port;
  tcp.timeout = options.store_timeout;
  tcp.connect_timeout = options.store_timeout;
  tcp.secret = env.secret;
  return std::make_shared<rendezvous::TcpStore>(tcp);
}

}  // namespace

int cuda_device_count() {
#ifdef DDP_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver/device" error
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

std::string resolve_backend(const std::string& requested, const std::string& env_override) {
  return resolve_backend(requested, env_override, 1, cuda_device_count());
}

std::string resolve_backend(const std::string& requested, const std::string& env_override,
                            int local_world_size, int visible_gpus) {
  const std::string& name = env_override.empty() ? requested : env_override;
  const std::string source =
      env_override.empty() ? "InitOptions::backend" : std::string(env::kBackend);
  if (name == "gloo") {
    return name;
  }
  if (name != "nccl" && name != "auto") {
    throw ConfigError(source + "='" + name + "' is not a backend (expected auto, gloo or nccl)");
  }
#ifndef DDP_HAVE_CUDA
  visible_gpus = 0;
#endif
  // NCCL needs a device of its own per local rank (two ranks on one GPU fail at init).
  if (visible_gpus >= local_world_size && visible_gpus > 0) {
    return "nccl";
  }
  if (name == "auto") {
    return "gloo";
  }
#ifdef DDP_HAVE_CUDA
  if (visible_gpus > 0) {
    throw ConfigError(source + "=nccl needs one GPU per local rank, but LOCAL_WORLD_SIZE=" +
                      std::to_string(local_world_size) + " and " + std::to_string(visible_gpus) +
                      " GPU(s) are visible; use gloo or fewer workers per node");
  }
  throw ConfigError(source + "=nccl but no CUDA device is visible; use gloo or run on a GPU");
#else
  throw ConfigError(source + "=nccl but this build has no CUDA/NCCL; use gloo");
#endif
}

DistContext::DistContext(EnvContract env, std::shared_ptr<rendezvous::Store> store,
                         std::unique_ptr<ProcessGroup> group,
                         std::unique_ptr<rendezvous::StoreServer> server)
    : server_(std::move(server)),
      env_(std::move(env)),
      store_(std::move(store)),
      group_(std::move(group)) {}

DistContext::~DistContext() {
  group_.reset();
  if (env_.world_size == 1) {
    return;
  }
  // Best effort and bounded: a destructor must not throw, and a dead peer must not hang us.
  try {
    // The last rank out marks the job done; the rank hosting the store waits for that mark
    // (a store wait, no polling) so no peer loses the store while it is still leaving.
    if (store_->add(kShutdownKey, 1) >= env_.world_size) store_->set(kShutdownDoneKey, "1");
    if (server_) store_->wait({kShutdownDoneKey}, kShutdownWait);
  } catch (const std::exception&) {
    // The store is already gone, or a peer never left (StoreTimeout): nothing left to protect.
  }
}

std::unique_ptr<DistContext> init(const InitOptions& options) {
  const EnvMap vars = options.env.empty() ? current_env() : options.env;
  EnvContract env = parse_env(vars);
  const std::string backend =
      resolve_backend(options.backend, env.backend, env.local_world_size, cuda_device_count());
  std::unique_ptr<rendezvous::StoreServer> server;
  auto base = connect_store(env, options, server);
  auto store = std::make_shared<rendezvous::PrefixStore>(env.store_prefix, base);

  std::unique_ptr<ProcessGroup> group;
  if (backend == "gloo") {
    GlooOptions gloo;
    gloo.rank = env.rank;
    gloo.size = env.world_size;
    gloo.timeout = options.timeout;
    gloo.connect_timeout = options.store_timeout;
    gloo.route_to = env.master_addr;
    gloo.direct_max_bytes = options.gloo_direct_max_bytes;
    group = std::make_unique<GlooProcessGroup>(store, gloo);
  } else {
#ifdef DDP_HAVE_CUDA
    NcclOptions nccl;
    nccl.rank = env.rank;
    nccl.size = env.world_size;
    nccl.device = env.local_rank;
    nccl.timeout = options.timeout;
    nccl.connect_timeout = options.store_timeout;
    group = std::make_unique<NcclProcessGroup>(store, nccl);
#endif
  }
  install_crash_backtrace(env.rank);
  // The agent asked for progress (--hang_timeout): report steps and collectives to it.
  if (auto file = vars.find(progress::kEnvProgressFile);
      file != vars.end() && !file->second.empty()) {
    group->set_progress(std::make_shared<ProgressReporter>(file->second, env.rank));
  }
  return std::make_unique<DistContext>(std::move(env), std::move(store), std::move(group),
                                       std::move(server));
}

}  // namespace ddp::worker_runtime
