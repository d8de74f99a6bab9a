#pragma once
// LaunchConfig: everything the command line (and PET_* environment) says about one launch,
// validated before anything is spawned. Rendezvous fields the user did not give stay
// std::nullopt so the rendezvous factory can fill them from SLURM or torchrun defaults.
#include <chrono>
#include <csignal>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/environment.hpp"
#include "common/peer_tolerance.hpp"
#include "launcher/binding/gpu_locality.hpp"
#include "launcher/binding/numa_binding.hpp"

namespace ddp::launcher {

using ddp::Environment;  // common/environment.hpp: name -> value

// torchrun's -r/-t value: 0 none, 1 stdout, 2 stderr, 3 both; optionally per local rank.
struct StreamSelection {
  int default_mode = 0;
  std::map<int, int> per_rank;  // local_rank -> mode, overrides default_mode

  // The 0-3 mode for local_rank.
  [[nodiscard]] int mode_for(int local_rank) const;
  // True when stdout (stream 1) or stderr (stream 2) of local_rank is selected.
  [[nodiscard]] bool selects(int local_rank, int stream) const;
};

struct LaunchConfig {
  // --- workers ---
  std::string nproc_per_node_spec = "1";  // as given: N | gpu | cpu | auto
  int nproc_per_node = 1;                 // resolved
  std::string role = "default";
  int max_restarts = 0;
  double monitor_interval_s = 0.1;  // accepted for compatibility; monitoring is event-driven
  // SIGTERM -> SIGKILL grace period (--stop_timeout, torchrun 2.x's --shutdown_timeout).
  std::chrono::milliseconds stop_timeout{30000};
  // How long a silent peer is only silence (--peer_tolerance, DDPLAUNCH_PEER_TOLERANCE):
  // TCP timeouts, keepalive, the rendezvous lease and the store client follow it; the agent
  // exports it to itself and its workers (docs/multinode.md, "Silence or death").
  std::chrono::milliseconds peer_tolerance = kDefaultPeerTolerance;
  // Signals the agent catches and forwards to the workers (--signals_to_handle); any other
  // keeps its default action. Ignored-at-start signals stay ignored (signal_list.hpp).
  std::vector<int> signals_to_handle{SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
  // --virtual_local_rank: every worker gets LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES narrowed to
  // its own GPU (the agent's CUDA_VISIBLE_DEVICES entry at its local rank, else the index).
  bool virtual_local_rank = false;
  // A rank whose progress has not moved this long is hung (docs/hangs.md); 0 = off.
  std::chrono::milliseconds hang_timeout{0};
  // --in_place_recovery (docs/recovery.md): a membership change keeps healthy workers running
  // and tells them their new rank over the recovery channel instead of restarting them.
  bool in_place_recovery = false;
  // How long a worker has to answer the new round (build its group and agree on the state)
  // before it is restarted as without in-place recovery (--recovery_timeout).
  std::chrono::milliseconds recovery_timeout{60000};
  // --spare_workers hot: with in-place recovery, a spare node's workers start while it stands
  // by and wait, parked, for the round that admits it (docs/recovery.md, Spares).
  bool hot_spares = true;
  // --standby_workers N: with in-place recovery, N parked processes per node that take the
  // place of a worker of this node that dies (docs/recovery.md, Standby workers).
  int standby_workers = 0;

  // --- rendezvous (nullopt = not given; the factory applies defaults) ---
  std::optional<std::string> nnodes;  // "N" or "MIN:MAX"
  int min_nodes = 1;                  // parsed from nnodes (1 when not given)
  int max_nodes = 1;
  std::optional<int> node_rank;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
  bool standalone = false;
  std::optional<std::string> run_id;
  std::optional<std::string> rdzv_backend;
  std::optional<std::string> rdzv_endpoint;
  std::optional<std::string> rdzv_conf;
  std::optional<std::string> local_addr;
  // Where a store this agent hosts listens (--store_bind), instead of where it is needed
  // (loopback for one node; the address the other nodes dial for several): docs/multinode.md.
  std::optional<std::string> store_bind;
  // The job secret's file (--secret_file; docs/security.md).
  std::optional<std::string> secret_file;
  bool agent_store = true;  // false: worker rank 0 hosts the store (torch < 2.0 behaviour)

  // --- program ---
  std::string program;  // script, module or executable as given
  std::vector<std::string> program_args;
  bool module = false;     // -m: python -m program
  bool no_python = false;  // --no_python: execute program directly even if .py
  bool run_path = false;  // --run_path: runpy.run_path(program) in python (wins over -m, no_python)
  std::string python_exec = "python3";  // PYTHON_EXEC overrides
  // The major version of the PyTorch python_exec imports, read from its files when the
  // workers run Python (torch_version.hpp); nullopt when unknown or not Python.
  std::optional<int> worker_torch_major;
  std::optional<std::string> pass_local_rank_arg;  // "local_rank" or "local-rank"
  bool use_env = false;  // torch.distributed.launch's --use_env: no --local_rank, on purpose
  // --adopt_daemons (default; --no_adopt_daemons turns it off): the agent is a child
  // subreaper, so what workers start outside their process groups (setsid -f) is adopted
  // and stopped with the group.
  bool adopt_daemons = true;

  // --- logs and reports ---
  // --slow_console=drop: a console whose reader stopped loses lines (counted) instead of
  // holding the workers back (the default, block).
  bool slow_console_drops = false;
  std::optional<std::string> log_dir;
  StreamSelection redirects;
  StreamSelection tee;
  std::optional<std::vector<int>> local_ranks_filter;  // console shows only these
  std::string log_line_prefix_template = "[${role_name}${local_rank}]:";
  // --log_collapse (on by default): the same line from several local ranks within a short
  // window prints once, prefixed with their ranks; the window when given (else the console's).
  bool log_collapse = true;
  std::optional<std::chrono::milliseconds> log_collapse_window;
  // --progress_bars: "auto" (a terminal's live area, else thinned), "thin" or "raw".
  std::string progress_bars = "auto";
  std::optional<std::string> events_file;
  // Worker lines containing any of these substrings are also written, prefixed, to
  // attempt_<n>/filtered_stdout.log (filtered_stderr.log) of the run directory.
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;

  // --- CPU and memory binding (docs/binding.md); at most one of the two ---
  std::optional<NumaMode> numa_binding;         // --numa_binding
  std::optional<std::string> cpu_bind;          // --cpu_bind as given
  std::vector<std::vector<int>> cpu_bind_cpus;  // its CPUs per local rank

  // --- the health endpoint (docs/operations.md) ---
  std::optional<int> health_port;         // --health_port (0: a free one); nullopt: off
  std::string health_bind = "127.0.0.1";  // --health_bind
};

// Parses torchrun's -r/-t syntax: "3" or "0:1,1:2". Throws ConfigError naming the value.
StreamSelection parse_stream_selection(const std::string& flag, const std::string& value);
// Parses "N" or "MIN:MAX" (1 <= MIN <= MAX). Throws ConfigError naming the value.
std::pair<int, int> parse_nnodes(const std::string& value);
// The CUDA_VISIBLE_DEVICES of the worker at local_rank under --virtual_local_rank, as torchrun
// 2.x picks it: the agent's entry at local_rank (spaces trimmed), or the index itself when the
// variable is unset. Throws ConfigError when the list has no entry at local_rank.
std::string virtual_visible_device(const Environment& env, int local_rank);
// Resolves N | gpu | cpu | auto to a worker count (gpu and auto: the visible_gpus of
// gpu_locality.hpp, the same GPUs --numa_binding anchors ranks on); gpu without a usable GPU
// is a ConfigError naming what was found.
int resolve_nproc_per_node(
    const std::string& spec, const Environment& env,
    const GpuProbe& gpus = [] { return probe_gpus(); });
// True when the workers run under python_exec: --run_path, -m, or a .py program (unless
// --no_python).
bool runs_python(const LaunchConfig& config);
// True when the flags ask for a rendezvous whose groups re-form (--rdzv_backend other than
// static: c10d, etcd). Before the rendezvous exists (SLURM defaults, the factory); once it does,
// the agent asks it (RendezvousHandler::kind()).
bool asks_elastic_rendezvous(const LaunchConfig& config);
// Checks everything that can be checked before spawning (ports, program, ranges).
void validate_config(const LaunchConfig& config, const Environment& env);
// Full path of an executable: as given when it contains '/', else searched on PATH, then in
// ddplaunch's own program directories (own_programs.hpp: libexec, or the build tree).
// Returns nullopt when not found or not executable.
std::optional<std::string> find_executable(const std::string& name, const Environment& env);

}  // namespace ddp::launcher
