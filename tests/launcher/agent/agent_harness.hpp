#pragma once
// One agent with fake workers and a fake rendezvous, for the agent's unit tests.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "launcher/agent/agent.hpp"
#include "tests/launcher/agent/fake_workers.hpp"

namespace ddp::launcher::testing {

// One agent with its fakes; its log lines are kept in `lines`, the failure summary goes to
// /dev/null, worker output nowhere (no consoles).
struct Harness {
  explicit Harness(int nproc, int max_restarts = 0) : spawner(io), rendezvous(nproc) {
    options.config.nproc_per_node = nproc;
    options.config.max_restarts = max_restarts;
    options.config.program = "/bin/true";
    options.config.stop_timeout = std::chrono::milliseconds(50);
    options.env = {{"PATH", "/usr/bin:/bin"}};
    options.run_dir =
        std::filesystem::temp_directory_path() / ("agent_test_" + std::to_string(::getpid()));
    options.handle_signals = false;
    options.notice_fd = null_fd;
  }
  ~Harness() {
    std::filesystem::remove_all(options.run_dir);
    ::close(null_fd);
  }
  int run() {
    LogRouter logs(log_options);
    EventLog events(events_path);
    if (on_event) events.set_listener(on_event);
    Agent agent(io, options, spawner, rendezvous, logs, events);
    agent_ptr = &agent;
    int status = agent.run();
    restarts = agent.restart_count();
    failures = agent.failures();
    agent_ptr = nullptr;
    return status;
  }

  // Every line the agent logged, whole ("<program>: ...\n"), in order.
  [[nodiscard]] bool logged(const std::string& text) const {
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& line) {
      return line.find(text) != std::string::npos;
    });
  }

  std::vector<std::string> lines;
  ddp::log::ScopedSink capture{
      [this](ddp::log::Level, std::string_view line) { lines.emplace_back(line); }};
  int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  boost::asio::io_context io;
  FakeSpawner spawner;
  FakeRendezvous rendezvous;
  AgentOptions options;
  LogRouterOptions log_options;
  std::optional<std::string> events_path;
  // Sees every event the agent records, on the agent's loop.
  std::function<void(const nlohmann::json&)> on_event;
  Agent* agent_ptr = nullptr;
  int restarts = -1;
  std::vector<WorkerFailure> failures;
};

}  // namespace ddp::launcher::testing
