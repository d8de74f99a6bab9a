#pragma once
// What the Agent is given beside its collaborators: the validated configuration, the
// environment its workers inherit, where this run's files and notices go, and the hooks of
// the composition root (launcher.cpp).
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/environment.hpp"
#include "launcher/binding/cpu_binding.hpp"
#include "launcher/config/launch_config.hpp"
#include "launcher/hang/hang_watch.hpp"
#include "launcher/output/console.hpp"
#include "launcher/process/worker_command.hpp"

namespace ddp::launcher {

struct AgentOptions {
  LaunchConfig config;
  Environment env;              // the agent's environment (workers inherit it)
  bool use_agent_store = true;  // TORCHELASTIC_USE_AGENT_STORE
  // Root of this run's files: attempt_<n>/<local_rank>/{error.json,stdout.log,stderr.log}.
  std::filesystem::path run_dir;
  bool write_log_files = true;  // -r/-t selected streams go to files under run_dir
  bool handle_signals = true;   // install the signal_set (tests drive handle_signal())
  std::string host = "localhost";
  // The failure summary goes here without a console. The agent's own lines go through
  // common/log.hpp, whose sink ddplaunch points at its console too.
  int notice_fd = 2;
  // When set, the summary goes through it instead: never blocking the loop.
  Console* notice_console = nullptr;
  // With a job secret: confines PyTorch store clients to the namespace of the attempt about
  // to start ("/worker/attempt_3/"), called before its workers spawn. Null: nothing to do.
  std::function<void(const std::string&)> set_worker_namespace;
  // How hang detection reads /proc (tests pass a fake; null: the real one).
  HangWatch::ProcReader read_proc;
  // Per local rank: the CPUs and memory its worker is bound to (empty: no binding).
  std::vector<CpuBinding> bindings;
};

}  // namespace ddp::launcher
