#include "launcher/config/cli.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "common/parse_int.hpp"
#include "common/peer_tolerance.hpp"
#include "common/version.hpp"
#include "launcher/binding/cpu_bind_option.hpp"
#include "launcher/config/signal_list.hpp"
#include "launcher/config/torch_version.hpp"

namespace ddp::launcher {
namespace {

// PET_NPROC_PER_NODE for --nproc_per_node: torchrun's env spelling of every option.
std::string pet_name(const std::string& long_name) {
  std::string name = "PET_";
  for (char c : long_name) {
    name.push_back(c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  }
  return name;
}

std::vector<int> parse_rank_list(const std::string& value) {
  std::vector<int> ranks;
  std::stringstream items(value);
  std::string item;
  while (std::getline(items, item, ',')) {
    try {
      size_t used = 0;
      int rank = std::stoi(item, &used);
      if (used != item.size() || rank < 0) throw std::invalid_argument(item);
      ranks.push_back(rank);
    } catch (const std::exception&) {
      throw ConfigError("--local_ranks_filter=" + value + ": '" + item +
                        "' is not a local rank (expected comma-separated integers like 0,2)");
    }
  }
  return ranks;
}

// torchrun 2.x's --duplicate_*_filters: comma-separated substrings, ",," for a comma in one;
// empty items are dropped (an empty substring would match every line).
std::vector<std::string> parse_line_filters(const std::string& value) {
  std::vector<std::string> filters;
  std::string current;
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] != ',') {
      current.push_back(value[i]);
    } else if (i + 1 < value.size() && value[i + 1] == ',') {
      current.push_back(',');
      ++i;
    } else {
      if (!current.empty()) filters.push_back(current);
      current.clear();
    }
  }
  if (!current.empty()) filters.push_back(current);
  return filters;
}

// TORCH_ELASTIC_SHUTDOWN_TIMEOUT, read (as torchrun 2.x reads it) when neither
// --stop_timeout nor --shutdown_timeout is given.
std::optional<double> shutdown_timeout_from_env(const Environment& env) {
  auto it = env.find(env::kShutdownTimeout);
  if (it == env.end()) return std::nullopt;
  auto seconds = try_parse_int(it->second, 0, int64_t{1} << 31);
  if (!seconds) {
    throw ConfigError(std::string(env::kShutdownTimeout) + "=" + it->second +
                      ": expected a non-negative whole number of seconds");
  }
  return static_cast<double>(*seconds);
}

// argparse reads `--opt=` as an empty value; CLI11 2.1 would take the next argument (the
// program) as the value instead. So a launcher option spelled `--opt=` becomes `--opt ""`.
// Only options before the program are touched: the walk stops at `--`, at the first argument
// that is not an option or an option's value, and at an unknown option (an error later).
std::vector<std::string> split_empty_values(const CLI::App& app,
                                            const std::vector<std::string>& args) {
  std::vector<std::string> result;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--" || !arg.starts_with('-') || arg == "-") break;
    auto eq = arg.find('=');
    const CLI::Option* option =
        app.get_option_no_throw(arg.starts_with("--") ? arg.substr(0, eq) : arg.substr(0, 2));
    if (option == nullptr) break;
    if (arg.starts_with("--") && eq == arg.size() - 1 && option->get_items_expected_min() > 0) {
      result.push_back(arg.substr(0, eq));
      result.emplace_back();
      continue;
    }
    result.push_back(arg);
    // `--opt VALUE` and `-r VALUE` (not `-r3`) carry their value in the next argument.
    bool separate = arg.starts_with("--") ? eq == std::string::npos : arg.size() == 2;
    if (separate && option->get_items_expected_min() > 0 && i + 1 < args.size()) {
      result.push_back(args[++i]);
    }
  }
  result.insert(result.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return result;
}

// CLI11's help with the usage line ddplaunch really has (CLI11 lists only options, since the
// program is parsed as "the rest"), and a flag's optional value written after its names as
// [=VALUE] instead of CLI11's --name{default}, which reads as part of the name.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App* /*app*/, std::string name) const override {
    return get_label("Usage") + ": " + name + " [OPTIONS] PROGRAM [ARGS...]\n";
  }
  std::string make_option_name(const CLI::Option* option, bool is_positional) const override {
    std::string names = CLI::Formatter::make_option_name(option, is_positional);
    std::string value;
    for (auto open = names.find('{'); open != std::string::npos; open = names.find('{')) {
      auto close = names.find('}', open);
      if (close == std::string::npos) break;
      value = names.substr(open + 1, close - open - 1);
      names.erase(open, close - open + 1);
    }
    return value.empty() ? names : names + "[=" + value + "]";
  }
};

// Raw option values as given (strings), converted and checked after parsing.
struct RawOptions {
  std::string nproc_per_node = "1";
  std::string nnodes;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;
  bool standalone = false;
  std::string secret_file;
  int max_restarts = 0;
  double monitor_interval = 0.1;
  std::string role = "default";
  bool module = false;
  bool no_python = false;
  bool run_path = false;
  std::string log_dir;
  std::string redirects = "0";
  std::string tee = "0";
  std::string local_ranks_filter;
  std::string run_id;
  std::string rdzv_backend;
  std::string rdzv_endpoint;
  std::string rdzv_conf;
  std::string local_addr;
  std::string store_bind;
  std::string start_method = "spawn";
  double stop_timeout = 30.0;
  std::string peer_tolerance;
  std::string signals_to_handle = kDefaultSignalsToHandle;
  bool virtual_local_rank = false;
  std::string duplicate_stdout_filters;
  std::string duplicate_stderr_filters;
  std::string logs_specs;
  std::string event_log_handler = "null";
  double hang_timeout = 0.0;
  bool in_place_recovery = false;
  double recovery_timeout = 60.0;
  std::string spare_workers = "hot";
  int standby_workers = 0;
  std::string prefix_template = "[${role_name}${local_rank}]:";
  std::string pass_local_rank_arg;
  bool use_env = false;
  std::string slow_console = "block";
  std::string log_collapse = "on";
  std::string progress_bars = "auto";
  bool adopt_daemons = true;
  bool no_agent_store = false;
  std::string events_file;
  std::string numa_binding;
  std::string cpu_bind;
  int health_port = -1;
  std::string health_bind = "127.0.0.1";
};

void add_options(CLI::App& app, RawOptions& raw) {
  app.add_option("--nproc_per_node,--nproc-per-node", raw.nproc_per_node,
                 "Workers per node: N, gpu, cpu or auto");
  app.add_option("--nnodes", raw.nnodes, "Number of nodes, N or MIN:MAX (elastic)");
  app.add_option("--node_rank,--node-rank", raw.node_rank, "This node's rank (static multi-node)");
  app.add_option("--master_addr,--master-addr", raw.master_addr,
                 "Address of the node hosting the store (default 127.0.0.1)");
  app.add_option("--master_port,--master-port", raw.master_port,
                 "Store port (default 29500; 0 picks a free one)");
  app.add_flag("--standalone", raw.standalone, "Single node, free port, random run id");
  app.add_option("--max_restarts,--max-restarts", raw.max_restarts,
                 "Restarts of the worker group before giving up");
  app.add_option("--monitor_interval,--monitor-interval", raw.monitor_interval,
                 "Accepted for torchrun compatibility; monitoring is event-driven");
  app.add_option("--role", raw.role, "Worker role name (ROLE_NAME)");
  app.add_flag("-m,--module", raw.module, "Run the program as a python module (python -m)");
  app.add_flag("--no_python,--no-python", raw.no_python, "Execute the program directly");
  app.add_flag("--run_path,--run-path", raw.run_path,
               "Run the program with runpy.run_path in python (wins over --no_python and -m)");
  app.add_option(
      "--log_dir,--log-dir", raw.log_dir,
      "Write DIR/<run_id>_<random>/attempt_<n>/<local_rank>/{stdout,stderr}.log, error.json");
  app.add_option("-r,--redirects", raw.redirects,
                 "Streams written to log files only: 0 none, 1 out, 2 err, 3 both, or 0:1,1:2");
  app.add_option("-t,--tee", raw.tee, "Streams written to log files and the console (as -r)");
  app.add_option("--local_ranks_filter,--local-ranks-filter", raw.local_ranks_filter,
                 "Comma-separated local ranks whose output reaches the console");
  app.add_option("--run_id,--run-id,--rdzv_id,--rdzv-id", raw.run_id,
                 "Job id (TORCHELASTIC_RUN_ID)");
  app.add_option("--rdzv_backend,--rdzv-backend", raw.rdzv_backend,
                 "static, c10d or etcd-v3 (etcd, etcd-v2: the same, over etcd's v3 API)");
  app.add_option("--rdzv_endpoint,--rdzv-endpoint", raw.rdzv_endpoint,
                 "host:port of the store (etcd: host:2379[,host:2379...])");
  app.add_option("--rdzv_conf,--rdzv-conf", raw.rdzv_conf, "key=value,... rendezvous settings");
  app.add_option("--local_addr,--local-addr", raw.local_addr, "Address other nodes reach us at");
  app.add_option("--store_bind,--store-bind", raw.store_bind,
                 "Address the store this agent hosts listens on, e.g. 0.0.0.0 or :: (every "
                 "interface); default: loopback for one node, else the address other nodes dial");
  app.add_option("--start_method,--start-method", raw.start_method,
                 "Accepted for torchrun compatibility (workers are always exec'd)");
  app.add_option("--stop_timeout,--stop-timeout,--shutdown_timeout,--shutdown-timeout",
                 raw.stop_timeout,
                 "Seconds between SIGTERM and SIGKILL when stopping workers (default "
                 "TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30)");
  app.add_option("--peer_tolerance,--peer-tolerance", raw.peer_tolerance,
                 "How long a silent peer (no packets: a cut link, a paused host) is only "
                 "silence before it is lost, in seconds or with a unit (500ms, 1m); drives every "
                 "liveness timer (default DDPLAUNCH_PEER_TOLERANCE, else 15; deaths are acted on "
                 "at once; docs/multinode.md)");
  app.add_option("--signals_to_handle,--signals-to-handle", raw.signals_to_handle,
                 "Comma-separated signals forwarded to the workers (default " +
                     std::string(kDefaultSignalsToHandle) +
                     "); others keep their default action, ignored ones stay ignored");
  app.add_flag("--virtual_local_rank,--virtual-local-rank", raw.virtual_local_rank,
               "LOCAL_RANK=0 for every worker, CUDA_VISIBLE_DEVICES narrowed to its own GPU");
  app.add_option("--duplicate_stdout_filters,--duplicate-stdout-filters",
                 raw.duplicate_stdout_filters,
                 "Comma-separated substrings (,, for a comma): worker stdout lines containing one "
                 "are also written to attempt_<n>/filtered_stdout.log");
  app.add_option("--duplicate_stderr_filters,--duplicate-stderr-filters",
                 raw.duplicate_stderr_filters,
                 "The same for stderr lines, into attempt_<n>/filtered_stderr.log");
  app.add_option("--logs_specs,--logs-specs", raw.logs_specs,
                 "torchrun's LogsSpecs plugin: refused (no Python plugins; use --log_dir, -r, -t)");
  app.add_option("--event_log_handler,--event-log-handler", raw.event_log_handler,
                 "torchrun's event handler: only 'null' (ddplaunch writes events with "
                 "--events_file)");
  app.add_option("--hang_timeout,--hang-timeout", raw.hang_timeout,
                 "Seconds without progress after which a rank is hung: its stack is dumped, "
                 "it is killed and the group restarts (default 0: off); also serves torch's "
                 "file timer (FileTimerClient, TORCHELASTIC_TIMER_FILE), as "
                 "TORCHELASTIC_ENABLE_FILE_TIMER=1 alone does (docs/hangs.md)");
  app.add_flag("--in_place_recovery,--in-place-recovery", raw.in_place_recovery,
               "A lost, joining or failed node does not restart healthy workers elsewhere: they "
               "are told their new rank and re-form in place (workers on the ddplaunch runtime, "
               "or PyTorch scripts using ddplaunch_recovery; docs/recovery.md)");
  app.add_option("--recovery_timeout,--recovery-timeout", raw.recovery_timeout,
                 "Seconds a kept worker has to re-form after a change before it is restarted "
                 "(default 60)");
  app.add_option("--spare_workers,--spare-workers", raw.spare_workers,
                 "With --in_place_recovery, a spare node (one that finds the group full) starts "
                 "its workers at once and parks them before their first collective (hot, the "
                 "default), or only once it is admitted (cold: for scripts that read RANK or "
                 "MASTER_ADDR before ddplaunch_recovery.Elastic; docs/recovery.md, Spares)");
  app.add_option("--standby_workers,--standby-workers", raw.standby_workers,
                 "With --in_place_recovery, N parked processes per node (default 0) that take "
                 "the place of a worker of this node that dies or hangs, so the group re-forms "
                 "without waiting for a fresh worker's start-up (docs/recovery.md, Standby "
                 "workers)");
  app.add_option(
      "--log_line_prefix_template,--log-line-prefix-template", raw.prefix_template,
      "Console line prefix; ${role_name}, ${rank}, ${local_rank}, ${hostname} are replaced");
  app.add_flag("--pass_local_rank_arg{local_rank},--pass-local-rank-arg{local_rank}",
               raw.pass_local_rank_arg,
               "Add --local_rank=N (=local-rank: --local-rank=N) for legacy scripts");
  app.add_option("--slow_console,--slow-console", raw.slow_console,
                 "When the console's reader falls behind: block (default: stop reading the "
                 "workers' output, which then wait, as with a slow terminal; nothing is lost) or "
                 "drop (lines are dropped and counted; workers never wait)");
  app.add_option("--log_collapse,--log-collapse", raw.log_collapse,
                 "on (default): the same line from several local ranks within 250 ms prints "
                 "once, prefixed with their ranks ([default0-7]:); a number: the same with a "
                 "window of that many ms (10 to 60000); off: one line per rank");
  app.add_option("--progress_bars,--progress-bars", raw.progress_bars,
                 "How '\\r' progress bars (tqdm) are shown: auto (default: each rank's bar "
                 "redrawn in place at the bottom of a terminal; in a pipe or file its newest state "
                 "at most every 5 s, and its last), thin (the latter everywhere) or raw (every "
                 "redraw as written)");
  app.add_flag("--adopt_daemons,--adopt-daemons,!--no_adopt_daemons,!--no-adopt-daemons",
               raw.adopt_daemons,
               "Adopt what workers start outside their process groups (setsid, daemons) and "
               "stop it with the group (a child subreaper; on by default, --no_adopt_daemons "
               "leaves daemons running as torchrun does; docs/cli.md)");
  app.add_flag("--use_env,--use-env", raw.use_env,
               "torch.distributed.launch's flag, accepted: LOCAL_RANK is always in the "
               "environment and no --local_rank argument is added");
  app.add_flag("--no_agent_store,--no-agent-store", raw.no_agent_store,
               "Worker rank 0 hosts the store (TORCHELASTIC_USE_AGENT_STORE=False)");
  app.add_option("--events_file,--events-file", raw.events_file, "Append JSON-lines events here");
  app.add_option("--health_port,--health-port", raw.health_port,
                 "Serve /health and /metrics over HTTP on this port (0: a free one; default: "
                 "TORCHELASTIC_HEALTH_CHECK_PORT, else off; docs/operations.md)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--health_bind,--health-bind", raw.health_bind,
                 "Address the health endpoint listens on (default 127.0.0.1; 0.0.0.0 or :: for "
                 "every interface)");
  app.add_option("--secret_file,--secret-file", raw.secret_file,
                 "The job secret (a file of mode 0600): agents and native workers prove it to "
                 "the store; one-node jobs make their own (docs/security.md)");
  app.add_option("--numa_binding,--numa-binding", raw.numa_binding,
                 "Bind each worker's CPUs and memory near its GPU: node, socket, exclusive or "
                 "core-complex (docs/binding.md)");
  app.add_option("--cpu_bind,--cpu-bind", raw.cpu_bind,
                 "CPUs per local rank: map_cpu:0,4,... mask_cpu:0x3,0xc,... or 0-3:4-7 "
                 "(docs/binding.md)");
}

// PET_<NAME> supplies any option not given on the command line. Returns, per option set that
// way, its long names and the variable it came from (so errors can name what the user set).
std::vector<std::pair<std::vector<std::string>, std::string>> apply_environment(
    CLI::App& app, const Environment& env) {
  std::vector<std::pair<std::vector<std::string>, std::string>> from_env;
  for (CLI::Option* option : app.get_options()) {
    if (option->count() != 0 || option->get_lnames().empty()) continue;
    if (option == app.get_help_ptr() || option == app.get_version_ptr()) continue;
    for (const auto& long_name : option->get_lnames()) {
      auto it = env.find(pet_name(long_name));
      if (it == env.end()) continue;
      try {
        option->add_result(it->second);
        option->run_callback();
      } catch (const CLI::Error& e) {
        throw ConfigError(it->first + "=" + it->second + ": " + e.what());
      }
      from_env.emplace_back(option->get_lnames(), it->first);
      break;
    }
  }
  return from_env;
}

// An error about an option the environment set ("--nproc_per_node=abc: ...") names the
// variable instead ("PET_NPROC_PER_NODE=abc: ..."): that is what the user has to change.
std::string name_env_source(
    std::string message,
    const std::vector<std::pair<std::vector<std::string>, std::string>>& from_env) {
  for (const auto& [long_names, variable] : from_env) {
    for (const auto& name : long_names) {
      std::string flag = "--" + name;
      if (!message.starts_with(flag) || message.size() == flag.size()) continue;
      char next = message[flag.size()];
      if (next != '=' && next != ' ' && next != ':') continue;
      return variable + message.substr(flag.size());
    }
  }
  return message;
}

LaunchConfig to_config(const RawOptions& raw, std::vector<std::string> rest, const CLI::App& app,
                       const Environment& env, const GpuProbe& gpus) {
  auto given = [&](const char* name) { return app.get_option(name)->count() != 0; };
  LaunchConfig config;
  // `ddplaunch [OPTIONS] -- PROGRAM [ARGS...]`, as torchrun (argparse) accepts: everything
  // after `--` is the program and its arguments, even what looks like an option.
  if (!rest.empty() && rest.front() == "--") {
    rest.erase(rest.begin());
  } else if (!rest.empty() && rest.front().starts_with('-') && rest.front() != "-") {
    throw ConfigError("unknown option '" + rest.front() + "' (see --help)");
  }
  if (rest.empty())
    throw ConfigError("no training program given (usage: ddplaunch [options] PROGRAM [ARGS...])");
  config.program = rest.front();
  config.program_args.assign(rest.begin() + 1, rest.end());

  config.nproc_per_node_spec = raw.nproc_per_node;
  config.nproc_per_node = resolve_nproc_per_node(raw.nproc_per_node, env, gpus);
  if (given("--nnodes")) {
    config.nnodes = raw.nnodes;
    std::tie(config.min_nodes, config.max_nodes) = parse_nnodes(raw.nnodes);
  }
  if (given("--node_rank")) config.node_rank = raw.node_rank;
  if (given("--master_addr")) config.master_addr = raw.master_addr;
  if (given("--master_port")) config.master_port = raw.master_port;
  config.standalone = raw.standalone;
  config.max_restarts = raw.max_restarts;
  config.monitor_interval_s = raw.monitor_interval;
  config.role = raw.role;
  config.module = raw.module;
  config.no_python = raw.no_python;
  config.run_path = raw.run_path;
  if (!raw.log_dir.empty()) config.log_dir = raw.log_dir;
  config.redirects = parse_stream_selection("--redirects", raw.redirects);
  config.tee = parse_stream_selection("--tee", raw.tee);
  if (given("--local_ranks_filter"))
    config.local_ranks_filter = parse_rank_list(raw.local_ranks_filter);
  if (given("--run_id")) config.run_id = raw.run_id;
  if (given("--rdzv_backend")) config.rdzv_backend = raw.rdzv_backend;
  if (given("--rdzv_endpoint")) config.rdzv_endpoint = raw.rdzv_endpoint;
  if (given("--rdzv_conf")) config.rdzv_conf = raw.rdzv_conf;
  if (given("--local_addr")) config.local_addr = raw.local_addr;
  if (given("--store_bind")) config.store_bind = raw.store_bind;
  if (raw.start_method != "spawn" && raw.start_method != "fork" &&
      raw.start_method != "forkserver") {
    throw ConfigError("--start_method=" + raw.start_method +
                      ": expected spawn, fork or forkserver");
  }
  if (!std::isfinite(raw.stop_timeout) || raw.stop_timeout < 0) {
    throw ConfigError("--stop_timeout (--shutdown_timeout)=" + std::to_string(raw.stop_timeout) +
                      ": expected a non-negative number of seconds");
  }
  double stop_timeout = raw.stop_timeout;
  if (!given("--stop_timeout"))
    stop_timeout = shutdown_timeout_from_env(env).value_or(stop_timeout);
  config.stop_timeout = std::chrono::milliseconds(static_cast<int64_t>(stop_timeout * 1000));
  if (given("--peer_tolerance")) {
    config.peer_tolerance = parse_peer_tolerance("--peer_tolerance", raw.peer_tolerance);
  } else if (auto it = env.find(env::kPeerTolerance); it != env.end() && !it->second.empty()) {
    config.peer_tolerance = parse_peer_tolerance(env::kPeerTolerance, it->second);
  }
  config.signals_to_handle = parse_signal_list(raw.signals_to_handle);
  config.virtual_local_rank = raw.virtual_local_rank;
  config.duplicate_stdout_filters = parse_line_filters(raw.duplicate_stdout_filters);
  config.duplicate_stderr_filters = parse_line_filters(raw.duplicate_stderr_filters);
  if (given("--logs_specs")) {
    throw ConfigError("--logs_specs=" + raw.logs_specs +
                      ": ddplaunch loads no Python LogsSpecs plugins; its log files are "
                      "chosen with --log_dir, -r/--redirects and -t/--tee (docs/cli.md)");
  }
  if (raw.event_log_handler != "null") {
    throw ConfigError("--event_log_handler=" + raw.event_log_handler +
                      ": only 'null' is accepted; ddplaunch writes its events as JSON lines "
                      "with --events_file PATH (docs/cli.md, Events)");
  }
  if (!std::isfinite(raw.hang_timeout) || raw.hang_timeout < 0) {
    throw ConfigError("--hang_timeout=" + std::to_string(raw.hang_timeout) +
                      ": expected a non-negative number of seconds (0 turns hang detection off)");
  }
  config.hang_timeout = std::chrono::milliseconds(static_cast<int64_t>(raw.hang_timeout * 1000));
  if (!std::isfinite(raw.recovery_timeout) || raw.recovery_timeout <= 0) {
    throw ConfigError("--recovery_timeout=" + std::to_string(raw.recovery_timeout) +
                      ": expected a positive number of seconds");
  }
  config.recovery_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(raw.recovery_timeout * 1000));
  config.in_place_recovery = raw.in_place_recovery;
  if (raw.spare_workers != "hot" && raw.spare_workers != "cold") {
    throw ConfigError("--spare_workers=" + raw.spare_workers + ": expected hot or cold");
  }
  config.hot_spares = raw.spare_workers == "hot";
  config.standby_workers = raw.standby_workers;
  config.log_line_prefix_template = raw.prefix_template;
  // torchrun 2.x has no flag, only this variable; as there, an empty value means the default.
  if (auto it = env.find(env::kLogLinePrefixTemplate);
      !given("--log_line_prefix_template") && it != env.end() && !it->second.empty()) {
    config.log_line_prefix_template = it->second;
  }
  if (given("--pass_local_rank_arg")) {
    // torch.distributed.launch: --use_env means "do not pass --local_rank".
    if (raw.use_env) {
      throw ConfigError("--use_env and --pass_local_rank_arg=" + raw.pass_local_rank_arg +
                        " contradict each other: --use_env means no --local_rank argument "
                        "(workers read LOCAL_RANK); give one of them");
    }
    config.pass_local_rank_arg = raw.pass_local_rank_arg;
  }
  config.use_env = raw.use_env;
  if (raw.slow_console != "block" && raw.slow_console != "drop") {
    throw ConfigError("--slow_console=" + raw.slow_console + ": expected block or drop");
  }
  config.slow_console_drops = raw.slow_console == "drop";
  config.log_collapse = raw.log_collapse != "off";
  if (raw.log_collapse != "on" && raw.log_collapse != "off") {
    // A window of its own, in milliseconds.
    const auto window = try_parse_int(raw.log_collapse, 10, 60000);
    if (!window) {
      throw ConfigError("--log_collapse=" + raw.log_collapse +
                        ": expected on, off, or a window in milliseconds from 10 to 60000");
    }
    config.log_collapse_window = std::chrono::milliseconds(*window);
  }
  if (raw.progress_bars != "auto" && raw.progress_bars != "thin" && raw.progress_bars != "raw") {
    throw ConfigError("--progress_bars=" + raw.progress_bars + ": expected auto, thin or raw");
  }
  config.progress_bars = raw.progress_bars;
  config.adopt_daemons = raw.adopt_daemons;
  config.agent_store = !raw.no_agent_store;
  if (!raw.events_file.empty()) config.events_file = raw.events_file;
  if (!raw.secret_file.empty()) config.secret_file = raw.secret_file;
  if (given("--numa_binding")) {
    config.numa_binding = parse_numa_mode(raw.numa_binding);
    if (!config.numa_binding) {
      throw ConfigError("--numa_binding=" + raw.numa_binding +
                        ": expected node, socket, exclusive or core-complex");
    }
  }
  if (given("--cpu_bind")) {
    if (config.numa_binding) {
      throw ConfigError("--cpu_bind=" + raw.cpu_bind + " and --numa_binding=" + raw.numa_binding +
                        " cannot be used together: pick one way of binding");
    }
    config.cpu_bind = raw.cpu_bind;
    config.cpu_bind_cpus = parse_cpu_bind(raw.cpu_bind, config.nproc_per_node);
  }
  if (given("--health_port")) {
    config.health_port = raw.health_port;
  } else if (auto it = env.find(env::kHealthCheckPort); it != env.end() && !it->second.empty()) {
    config.health_port = static_cast<int>(parse_int(env::kHealthCheckPort, it->second, 0, 65535));
  }
  config.health_bind = raw.health_bind;
  if (auto it = env.find("PYTHON_EXEC"); it != env.end() && !it->second.empty()) {
    config.python_exec = it->second;
  }
  validate_config(config, env);
  if (runs_python(config)) {
    config.worker_torch_major = worker_torch_major(*find_executable(config.python_exec, env), env);
  }
  return config;
}

}  // namespace

CommandLine parse_command_line(const std::vector<std::string>& args, const Environment& env,
                               const GpuProbe& gpus) {
  CLI::App app{
      "ddplaunch: a native torchrun. Starts PROGRAM once per worker with the torchrun "
      "environment contract, hosts the store, restarts and reports failures.",
      "ddplaunch"};
  app.prefix_command();  // everything from the program name on belongs to the program
  app.formatter(std::make_shared<HelpFormatter>());
  app.set_version_flag("--version", std::string("ddplaunch ") + kVersion,
                       "Print the version (ddplaunch X.Y.Z) and exit");
  app.footer(
      "Then: PROGRAM [ARGS...]. A .py file (or -m MODULE) runs under python3 -u (PYTHON_EXEC "
      "overrides); anything else is executed directly. ${local_rank} in ARGS is replaced.\n"
      "Every option can also be set as PET_<NAME> (PET_NPROC_PER_NODE=2); the flag wins.\n"
      "See docs/cli.md and docs/env.md.");
  RawOptions raw;
  add_options(app, raw);
  // CLI11 wants argv order reversed when given a vector.
  auto normalized = split_empty_values(app, args);
  std::vector<std::string> reversed(normalized.rbegin(), normalized.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    return CommandLine{std::nullopt, app.help()};
  } catch (const CLI::CallForVersion& e) {
    return CommandLine{std::nullopt, e.what() + std::string("\n")};
  } catch (const CLI::ParseError& e) {
    throw ConfigError(e.what());
  }
  auto from_env = apply_environment(app, env);
  try {
    return CommandLine{to_config(raw, app.remaining(), app, env, gpus), {}};
  } catch (const ConfigError& e) {
    throw ConfigError(name_env_source(e.what(), from_env));
  }
}

}  // namespace ddp::launcher
