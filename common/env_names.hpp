#pragma once
// The env contract between ddplaunch and its workers, declared once.
// Names and meanings follow torchrun so torch's init_process_group("env://") works unchanged.
// Everything this project adds is prefixed DDPLAUNCH_ and listed in docs/env.md.

namespace ddp::env {

// --- torchrun contract (set by the agent for every worker) ---
inline constexpr const char* kRank = "RANK";
inline constexpr const char* kLocalRank = "LOCAL_RANK";
inline constexpr const char* kWorldSize = "WORLD_SIZE";
inline constexpr const char* kLocalWorldSize = "LOCAL_WORLD_SIZE";
inline constexpr const char* kGroupRank = "GROUP_RANK";
inline constexpr const char* kGroupWorldSize = "GROUP_WORLD_SIZE";
inline constexpr const char* kRoleName = "ROLE_NAME";
inline constexpr const char* kRoleRank = "ROLE_RANK";
inline constexpr const char* kRoleWorldSize = "ROLE_WORLD_SIZE";
inline constexpr const char* kMasterAddr = "MASTER_ADDR";
inline constexpr const char* kMasterPort = "MASTER_PORT";
inline constexpr const char* kRestartCount = "TORCHELASTIC_RESTART_COUNT";
inline constexpr const char* kMaxRestarts = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr const char* kRunId = "TORCHELASTIC_RUN_ID";
inline constexpr const char* kUseAgentStore = "TORCHELASTIC_USE_AGENT_STORE";
inline constexpr const char* kErrorFile = "TORCHELASTIC_ERROR_FILE";
inline constexpr const char* kOmpNumThreads = "OMP_NUM_THREADS";
// The signals the agent handles (--signals_to_handle), as torchrun 2.x hands them on.
inline constexpr const char* kSignalsToHandle = "TORCHELASTIC_SIGNALS_TO_HANDLE";
// Narrowed to the worker's own GPU under --virtual_local_rank.
inline constexpr const char* kCudaVisibleDevices = "CUDA_VISIBLE_DEVICES";

// --- read by the agent, as torchrun 2.x reads them ---
// The console line prefix when --log_line_prefix_template is not given (an empty value is unset).
inline constexpr const char* kLogLinePrefixTemplate = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE";
// --stop_timeout (--shutdown_timeout) when not given: seconds, a non-negative integer.
inline constexpr const char* kShutdownTimeout = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT";
// Set to 1 unless the user set it: a Python worker that dies of a fatal signal (or is sent
// SIGABRT by hang detection) prints every thread's traceback (docs/hangs.md).
inline constexpr const char* kPythonFaultHandler = "PYTHONFAULTHANDLER";
inline constexpr const char* kTorchNcclAsyncErrorHandling = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
inline constexpr const char* kNcclAsyncErrorHandling = "NCCL_ASYNC_ERROR_HANDLING";

// --- SLURM (read as fallbacks) ---
inline constexpr const char* kSlurmProcId = "SLURM_PROCID";
inline constexpr const char* kSlurmLocalId = "SLURM_LOCALID";
inline constexpr const char* kSlurmNtasks = "SLURM_NTASKS";
inline constexpr const char* kSlurmNnodes = "SLURM_NNODES";
inline constexpr const char* kSlurmNodeId = "SLURM_NODEID";
inline constexpr const char* kSlurmJobNodelist = "SLURM_JOB_NODELIST";
inline constexpr const char* kSlurmJobId = "SLURM_JOB_ID";
inline constexpr const char* kSlurmStepId = "SLURM_STEP_ID";

// --- ddplaunch additions ---
// Collective backend override for native workers: "nccl" or "gloo".
inline constexpr const char* kBackend = "DDPLAUNCH_BACKEND";
// Store prefix the worker runtime uses (default /worker/attempt_<restart>).
inline constexpr const char* kStorePrefix = "DDPLAUNCH_STORE_PREFIX";

// I/O backend of every store server this process hosts: "auto" (io_uring where the kernel
// allows it, else epoll), "epoll" or "io_uring".
inline constexpr const char* kStoreIo = "DDPLAUNCH_STORE_IO";

// Limits of every store server this process hosts (rendezvous/store/server/server_limits.hpp,
// docs/security.md ("Limits")): connections per client address (default 1024), bytes held (keys,
// values, ON_CLOSE records, parked waits' keys: 1 GiB), keys (1Mi), and how long part of a request
// may wait for the rest before the connection is closed (ms, 30000). A bad value is a ConfigError.
inline constexpr const char* kStoreMaxConnsPerPeer = "DDPLAUNCH_STORE_MAX_CONNS_PER_PEER";
inline constexpr const char* kStoreMaxBytes = "DDPLAUNCH_STORE_MAX_BYTES";
inline constexpr const char* kStoreMaxKeys = "DDPLAUNCH_STORE_MAX_KEYS";
inline constexpr const char* kStoreFrameTimeoutMs = "DDPLAUNCH_STORE_FRAME_TIMEOUT_MS";

// How long a silent peer (no packets: a cut link, a paused host) is only silence, in seconds
// (default 15, like torchrun): every timer that notices silence follows it: TCP_USER_TIMEOUT and
// keepalive on store connections, the rendezvous lease, the store client's cancel wait. Deaths
// (a closed or reset connection) are acted on at once whatever it is. `--peer_tolerance` sets it,
// and the agent hands it on to its workers. docs/multinode.md, "Silence or death".
inline constexpr const char* kPeerTolerance = "DDPLAUNCH_PEER_TOLERANCE";

// Dead-peer detection on every store connection, client and server side (common/tcp_liveness.hpp):
// keepalive idle and interval seconds, unanswered probes, and TCP_USER_TIMEOUT in ms (0: the
// kernel's default). Each overrides what DDPLAUNCH_PEER_TOLERANCE implies. docs/store.md.
inline constexpr const char* kTcpKeepIdle = "DDPLAUNCH_TCP_KEEPIDLE";
inline constexpr const char* kTcpKeepIntvl = "DDPLAUNCH_TCP_KEEPINTVL";
inline constexpr const char* kTcpKeepCnt = "DDPLAUNCH_TCP_KEEPCNT";
inline constexpr const char* kTcpUserTimeout = "DDPLAUNCH_TCP_USER_TIMEOUT";
// The longest wait between resends of unacknowledged data, in ms (0: the kernel's; Linux 6.15
// on, ignored before).
inline constexpr const char* kTcpRtoMax = "DDPLAUNCH_TCP_RTO_MAX_MS";

// Which lines every program here logs (common/log.hpp): "error", "warn", "info" (default) or
// "debug". A bad value is one warning naming it, then info.
inline constexpr const char* kLogLevel = "DDPLAUNCH_LOG_LEVEL";

// The job secret (docs/security.md): a file holding it (mode 0600, owned by the user), or the
// secret itself as hex, which the agent hands its workers (never written to disk; /proc/<pid>/
// environ is readable only by the same user). DDPLAUNCH_SECRET wins when both are set.
inline constexpr const char* kSecretFile = "DDPLAUNCH_SECRET_FILE";
inline constexpr const char* kSecret = "DDPLAUNCH_SECRET";

// Store key prefix for workers of one attempt, shared by agent and PyTorch workers.
inline constexpr const char* kWorkerPrefixBase = "/worker/attempt_";

// Progress lines (docs/hangs.md, "The progress protocol"): the FIFO a worker writes
// "v1 rank=.. pid=.. step=.." lines into; the agent sets it for every worker.
inline constexpr const char* kProgressFile = "DDPLAUNCH_PROGRESS_FILE";

// --- torchrun's file timer (torch.distributed.elastic.timer.FileTimerServer/Client) ---
// "1" in the agent's environment turns the file-timer server on.
inline constexpr const char* kEnableFileTimer = "TORCHELASTIC_ENABLE_FILE_TIMER";
// The FIFO path: read by the agent when set, passed to workers (FileTimerClient(path)).
inline constexpr const char* kTimerFile = "TORCHELASTIC_TIMER_FILE";

// torchrun's health check port (read by torch's agent, which serves nothing on it): ddplaunch
// serves /health and /metrics there when --health_port is not given (docs/operations.md).
inline constexpr const char* kHealthCheckPort = "TORCHELASTIC_HEALTH_CHECK_PORT";

// Nodes of the current srun step (SLURM_JOB_NODELIST is the whole allocation); multinode.
inline constexpr const char* kSlurmStepNodelist = "SLURM_STEP_NODELIST";

}  // namespace ddp::env
