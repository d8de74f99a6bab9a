#pragma once
// A ddplaunch agent run as a child process by the multi-node tests: output goes to a log
// file; the destructor SIGKILLs and reaps it, so a failing test leaves no agent behind.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tests/support/process.hpp"  // process_alive

namespace ddp::test {

class AgentProcess {
 public:
  // Starts build/ddplaunch with args; extra_env is added to this process' environment.
  AgentProcess(const std::vector<std::string>& args,
               const std::map<std::string, std::string>& extra_env, std::string log_path);
  ~AgentProcess();
  AgentProcess(const AgentProcess&) = delete;
  AgentProcess& operator=(const AgentProcess&) = delete;

  // Waits up to guard for the exit; the exit code (128+signal when killed), nullopt if still
  // running at the deadline.
  std::optional<int> wait(std::chrono::milliseconds guard);
  void kill(int sig);
  [[nodiscard]] std::string log() const;
  // Waits up to guard until the log contains text.
  bool wait_for_log(const std::string& text, std::chrono::milliseconds guard) const;
  [[nodiscard]] pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
  std::string log_path_;
};

// The port of the agent's "health endpoint on http://127.0.0.1:PORT" line, once it has
// printed it (waiting up to guard); nullopt when it did not.
std::optional<uint16_t> health_endpoint_port(const AgentProcess& agent,
                                             std::chrono::milliseconds guard);

// Runs build/ddplaunch with args to its end (in its own process group; stdout and stderr
// interleaved; killed at guard): what it printed and its exit status.
ProcessResult run_ddplaunch(const std::vector<std::string>& args,
                            const std::map<std::string, std::string>& env,
                            std::chrono::milliseconds guard);

// The events named name in an agent's --events_file (one JSON object a line; a line that does
// not parse, one being written, is skipped).
std::vector<nlohmann::json> events_named(const std::string& path, const std::string& name);

// build/train on the e2e tests' synthetic data (1,200 rows of 16 features, 4 classes, hidden
// 32, batch 16 per rank, seed 5, a line every step) for epochs, each step slow_ms longer
// (--fault_slow_step_ms), then more flags.
std::vector<std::string> synthetic_train(int epochs, int slow_ms,
                                         const std::vector<std::string>& more = {});

// A port nobody listens on right now (the kernel picks it).
int free_port();
// A fresh private directory under TMPDIR for one test's logs.
std::string make_temp_dir();
// RANK values printed by test workers ("WORKER RANK=<r> ... WORLD_SIZE=<world_size> ") in
// one agent's log.
std::set<int> ranks_in(const std::string& log, int world_size);

}  // namespace ddp::test
