#include "launcher/launcher.hpp"

#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string_view>

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "common/host_address.hpp"
#include "common/log.hpp"
#include "common/peer_tolerance.hpp"
#include "common/secret.hpp"
#include "common/sigpipe.hpp"
#include "launcher/agent/agent.hpp"
#include "launcher/config/cli.hpp"
#include "launcher/config/script_hints.hpp"
#include "launcher/health/health_routes.hpp"
#include "launcher/health/health_server.hpp"
#include "launcher/health/job_page.hpp"
#include "launcher/health/metrics_view.hpp"
#include "launcher/output/console.hpp"
#include "launcher/output/event_log.hpp"
#include "launcher/output/log_router.hpp"
#include "launcher/output/run_directory.hpp"
#include "launcher/process/orphan_guardian.hpp"
#include "launcher/process/process_spawner.hpp"
#include "launcher/process/worker_binding.hpp"
#include "launcher/rendezvous_setup/rendezvous_factory.hpp"
#include "rendezvous/store/server/fd_limit.hpp"

namespace ddp::launcher {
namespace {

constexpr int kBadUsage = 2;  // what argparse (and so torchrun) returns for bad flags

// --health_port: /health, /metrics and the job page, served from the agent's own loop and fed
// by its events (docs/operations.md). Null when no port was asked for.
std::unique_ptr<HealthServer> start_health_endpoint(boost::asio::io_context& io,
                                                    const LaunchConfig& config, const Agent& agent,
                                                    AgentMetrics& metrics, JobPage& page,
                                                    EventLog& events) {
  if (!config.health_port) return nullptr;
  events.set_listener([&metrics, &page](const nlohmann::json& event) {
    metrics.observe(event);
    page.observe(event);
  });
  HealthServerOptions options;
  options.host = config.health_bind;
  options.port = static_cast<uint16_t>(*config.health_port);
  auto server = std::make_unique<HealthServer>(
      io, options, [&agent, &metrics, &page](std::string_view method, std::string_view target) {
        return route_health_request(method, target, state_name(agent.state()), metrics, &page);
      });
  DDP_LOG_INFO("health endpoint on " + server->url());
  return server;
}

int launch(const LaunchConfig& config, const Environment& env) {
  survive_sigpipe();  // `ddplaunch ... | head`: the job must not die with the console
  // Before any thread or connection: every store connection of this process (client and
  // server ends, tcp_liveness.hpp) and the store client's waits read it from here.
  const std::string tolerance_s = tolerance_seconds(config.peer_tolerance);
  ::setenv(env::kPeerTolerance, tolerance_s.c_str(), 1);
  // Resolved before anything starts, so a binding the machine cannot honour is a usage error.
  std::vector<CpuBinding> bindings;
  std::optional<MachineLayout> machine;
  if (config.numa_binding || config.cpu_bind) {
    machine = probe_machine_layout(env);
    bindings = resolve_worker_bindings(config, *machine);
  }
  // Forked before any thread exists (the store server starts one).
  OrphanGuardian guardian;
  // A store-hosting agent of a large job serves one connection per node (and per worker).
  rendezvous::raise_fd_limit();
  auto setup = make_rendezvous(config, env);
  RunDirectory run_dir(config, setup.run_id, env);

  // Redirected streams need files even without --log_dir (torchrun does the same in a
  // temporary directory); say where they are then.
  bool wants_files = config.redirects.default_mode != 0 || !config.redirects.per_rank.empty() ||
                     config.tee.default_mode != 0 || !config.tee.per_rank.empty();
  bool writes_files = wants_files || !config.duplicate_stdout_filters.empty() ||
                      !config.duplicate_stderr_filters.empty();
  // The end of the console's drop notice: where the dropped lines can still be read.
  std::string hint =
      !wants_files     ? "-t 3 --log_dir DIR would keep everything in files"
      : config.log_dir ? "the -r/-t log files under " + run_dir.path().string() + " keep every line"
                       : "the -r/-t log files keep every line";
  // Made first and destroyed last: the log router's timer and the consoles' room listener
  // use it.
  boost::asio::io_context io;
  // On a terminal, bars get a live area at its bottom (--progress_bars auto).
  const bool live_bars = config.progress_bars == "auto" && env_value(env, "TERM") != "dumb";
  Consoles consoles(STDOUT_FILENO, STDERR_FILENO, hint,
                    config.slow_console_drops ? SlowConsole::kDrop : SlowConsole::kBlock,
                    live_bars);
  // Every log line of this process (the agent's, the rendezvous watchers', the store
  // server's) goes through the console's writer from now on, so no thread blocks on a
  // stalled stderr, and lines keep their order with the workers' output.
  std::optional<log::ScopedSink> to_console;
  to_console.emplace(
      [&err = consoles.err()](log::Level, std::string_view line) { err.write(line); });
  if (!run_dir.temporary()) {
    DDP_LOG_INFO("log directory set to: " + run_dir.path().string());
  } else if (writes_files) {
    DDP_LOG_INFO("no --log_dir given; redirected output goes to " + run_dir.path().string() +
                 " (removed at exit unless the job fails)");
  }

  if (auto legacy = local_rank_hint(config)) DDP_LOG_WARN(*legacy);
  if (auto timer = file_timer_hint(config, env)) DDP_LOG_WARN(*timer);

  for (size_t rank = 0; rank < bindings.size(); ++rank) {
    DDP_LOG_INFO(describe_binding(static_cast<int>(rank), bindings[rank], machine->topology));
  }

  LogRouterOptions log_options;
  log_options.prefix_template = config.log_line_prefix_template;
  log_options.role_name = config.role;
  log_options.redirects = config.redirects;
  log_options.tee = config.tee;
  log_options.local_ranks_filter = config.local_ranks_filter;
  log_options.stdout_filters = config.duplicate_stdout_filters;
  log_options.stderr_filters = config.duplicate_stderr_filters;
  log_options.stdout_console = &consoles.out();
  log_options.stderr_console = &consoles.err();
  log_options.collapse = config.log_collapse;
  if (config.log_collapse_window) log_options.collapse_window = *config.log_collapse_window;
  log_options.progress_bars = config.progress_bars == "raw"    ? ProgressBars::kRaw
                              : config.progress_bars == "thin" ? ProgressBars::kThin
                                                               : ProgressBars::kAuto;
  log_options.io = &io;
  LogRouter logs(log_options);
  AgentMetrics metrics(setup.run_id, config.max_restarts);
  EventLog events(config.events_file);

  AgentOptions agent_options;
  agent_options.config = config;
  agent_options.env = env;
  if (!setup.secret.empty()) {
    // Workers inherit it through their environment only: /proc/<pid>/environ is readable by
    // this user alone, and nothing is written to disk (docs/security.md).
    agent_options.env[env::kSecret] = to_hex(setup.secret);
  } else {
    agent_options.env.erase(env::kSecret);  // a stale one would fail against an open store
  }
  agent_options.set_worker_namespace = setup.set_worker_namespace;
  agent_options.use_agent_store = setup.workers_use_agent_store;
  agent_options.run_dir = run_dir.path();
  agent_options.notice_console = &consoles.err();
  agent_options.host = fully_qualified_host_name();
  agent_options.bindings = std::move(bindings);

  ProcessSpawner spawner(io, &guardian, config.adopt_daemons);
  // Called on a console's writer thread; the reads resume on the agent's loop (handlers run
  // only inside agent.run(), while the spawner exists).
  consoles.set_room_listener(
      [&io, &spawner] { boost::asio::post(io, [&spawner] { spawner.resume_output(); }); });
  Agent agent(io, agent_options, spawner, *setup.handler, logs, events);
  JobPageSources page_sources;
  page_sources.host = agent_options.host;
  page_sources.output = [&logs](int local_rank) {
    return RankOutput{logs.progress(local_rank), logs.recent_lines(local_rank)};
  };
  page_sources.failures = [&agent] { return agent.failures(); };
  JobPage page(metrics, std::move(page_sources));
  auto health = start_health_endpoint(io, config, agent, metrics, page, events);
  int status = agent.run();
  health.reset();
  logs.end_attempt();  // a last line without its newline
  if (const auto kept = run_dir.finish(status); !kept.empty()) DDP_LOG_WARN(kept);
  // Lines logged from here on (threads still winding down) go to stderr directly.
  to_console.reset();
  consoles.close();
  return status;
}

}  // namespace

Environment capture_environment(char** envp) {
  Environment env;
  for (char** entry = envp; entry != nullptr && *entry != nullptr; ++entry) {
    std::string text(*entry);
    auto eq = text.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(text.substr(0, eq), text.substr(eq + 1));
  }
  return env;
}

int run_launcher(const std::vector<std::string>& args, const Environment& env) {
  std::optional<LaunchConfig> config;
  try {
    auto command_line = parse_command_line(args, env);
    if (!command_line.config) {
      std::cout << command_line.help;
      return 0;
    }
    config = std::move(command_line.config);
  } catch (const ConfigError& e) {
    DDP_LOG_ERROR(std::string("error: ") + e.what());
    return kBadUsage;
  }
  try {
    return launch(*config, env);
  } catch (const ConfigError& e) {
    DDP_LOG_ERROR(std::string("error: ") + e.what());
    return kBadUsage;
  } catch (const std::exception& e) {
    DDP_LOG_ERROR(std::string("error: ") + e.what());
    return 1;
  }
}

}  // namespace ddp::launcher
