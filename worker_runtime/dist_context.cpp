#include "worker_runtime/dist_context.hpp"

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "common/host_address.hpp"
#include "common/log.hpp"
#include "common/progress_protocol.hpp"
#include "rendezvous/store/memory_store.hpp"
#include "rendezvous/store/prefix_store.hpp"
#include "rendezvous/store/tcp_store.hpp"
#include "worker_runtime/cancellable_store.hpp"
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
// ADD counters, per attempt: ranks that run with the agent's recovery channel, and ranks
// that run without. Two counters, not one compared with the world size: a worker replaced in
// the same round (killed by --recovery_timeout while it built its group) counts twice, but
// always on its own node's side.
constexpr const char* kInPlaceRanksKey = "runtime/in_place_ranks";
constexpr const char* kClassicRanksKey = "runtime/classic_ranks";

// Before the group is built: this rank counts itself on its side.
void count_recovery_mode(rendezvous::Store& store, bool in_place) {
  store.add(in_place ? kInPlaceRanksKey : kClassicRanksKey, 1);
}

// After the group is built every rank has counted itself (each did before it connected), so
// the other side's count is final. A job whose nodes disagree on --in_place_recovery would
// run different collectives (at the start: the state agreement; after the first change:
// everything) and hang or fail obscurely; it fails here instead, on every rank, saying why.
void check_recovery_mode(rendezvous::Store& store, bool in_place) {
  const int64_t others = store.add(in_place ? kClassicRanksKey : kInPlaceRanksKey, 0);
  if (others == 0) return;
  const int64_t same = store.add(in_place ? kInPlaceRanksKey : kClassicRanksKey, 0);
  const int64_t with = in_place ? same : others;
  const int64_t without = in_place ? others : same;
  throw ConfigError(std::to_string(with) + " rank(s) run under ddplaunch --in_place_recovery and " +
                    std::to_string(without) + " without it (this rank " +
                    (in_place ? "with" : "without") +
                    "): start every node of the job with the same flags");
}

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

// The process group of env's rank and world over store (already prefixed).
std::unique_ptr<ProcessGroup> make_group(const EnvContract& env,
                                         const std::shared_ptr<rendezvous::Store>& store,
                                         const InitOptions& options, const std::string& backend) {
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
  return group;
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
                         std::unique_ptr<rendezvous::StoreServer> server,
                         std::shared_ptr<rendezvous::Store> base_store)
    : server_(std::move(server)),
      env_(std::move(env)),
      store_(std::move(store)),
      base_store_(base_store ? std::move(base_store) : store_),
      group_(std::move(group)),
      round_(env_.restart_count) {}

DistContext::~DistContext() {
  if (recovery_) recovery_->set_group(nullptr);  // the reader must not abort a dead group
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
  EnvMap vars = options.env.empty() ? current_env() : options.env;
  // A spare's worker waits here until its node is admitted, then has the env of that round.
  auto recovery = await_admission(vars);
  EnvContract env = parse_env(vars);
  const std::string backend =
      resolve_backend(options.backend, env.backend, env.local_world_size, cuda_device_count());
  std::unique_ptr<rendezvous::StoreServer> server;
  // The agent hears `hello` before the group is built (that waits for every rank); an
  // `abort` arriving meanwhile aborts the group as soon as it exists (set_group).
  if (!recovery) recovery = make_recovery_client(vars, env.local_rank);
  auto base = connect_store(env, options, server);
  auto store = std::make_shared<rendezvous::PrefixStore>(env.store_prefix, base);

  count_recovery_mode(*store, recovery != nullptr);
  auto group = make_group(env, store, options, backend);
  check_recovery_mode(*store, recovery != nullptr);
  install_crash_backtrace(env.rank);
  // The agent asked for progress (--hang_timeout): report steps and collectives to it.
  if (auto file = vars.find(progress::kEnvProgressFile);
      file != vars.end() && !file->second.empty()) {
    group->set_progress(std::make_shared<ProgressReporter>(file->second, env.rank));
  }
  auto context = std::make_unique<DistContext>(std::move(env), std::move(store), std::move(group),
                                               std::move(server), std::move(base));
  if (recovery) {
    InitOptions kept = options;
    kept.env = vars;
    kept.backend = backend;
    context->enable_recovery(std::move(recovery), std::move(kept));
  }
  return context;
}

void DistContext::enable_recovery(std::unique_ptr<RecoveryClient> client, InitOptions options) {
  recovery_ = std::move(client);
  options_ = std::move(options);
  recovery_->set_group(group_.get());
  recovery_->send_built(env_.restart_count);
}

recovery::RoundNotice DistContext::recover(Duration timeout) {
  if (!recovery_) {
    throw ConfigError("recover() needs in-place recovery (DDPLAUNCH_RECOVERY_FD is not set)");
  }
  recovery::RoundNotice notice = recovery_->wait_round(timeout);
  // The old group goes first: its comm thread joins (its collectives fail at once: aborted).
  auto progress = group_ ? group_->progress_shared() : nullptr;
  recovery_->set_group(nullptr);
  group_.reset();
  apply(notice);
  if (!options_.store && (notice.master_addr != env_.master_addr ||
                          notice.master_port != static_cast<int>(env_.master_port))) {
    env_.master_addr = notice.master_addr;
    env_.master_port = static_cast<uint16_t>(notice.master_port);
    std::unique_ptr<rendezvous::StoreServer> no_server;  // the agent hosts the store in place
    EnvContract agent_store = env_;
    agent_store.use_agent_store = true;
    base_store_ = connect_store(agent_store, options_, no_server);
  }
  store_ = std::make_shared<rendezvous::PrefixStore>(env_.store_prefix, base_store_);
  count_recovery_mode(*store_, true);
  // Built through a store whose waits end as soon as another change is announced: a peer of
  // this round that died before publishing its address must not hold the build until the
  // connect timeout (cancellable_store.hpp).
  RecoveryClient* client = recovery_.get();
  auto building = std::make_shared<CancellableStore>(
      store_, [client] { return client->change_pending(); },
      "the membership changed again while the group of round " + std::to_string(notice.round) +
          " was built");
  group_ = make_group(env_, building, options_, options_.backend);
  check_recovery_mode(*store_, true);
  if (progress) group_->set_progress(progress);
  recovery_->set_group(group_.get());
  recovery_->send_built(notice.round);
  return notice;
}

void DistContext::apply(const recovery::RoundNotice& notice) {
  env_.rank = notice.rank;
  env_.world_size = notice.world_size;
  env_.group_rank = notice.group_rank;
  env_.local_world_size = notice.local_world_size;
  env_.restart_count = notice.restart_count;
  env_.store_prefix = attempt_store_prefix(notice.round);
  round_ = notice.round;
}

}  // namespace ddp::worker_runtime
