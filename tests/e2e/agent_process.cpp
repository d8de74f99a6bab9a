#include "agent_process.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace ddp::test {

AgentProcess::AgentProcess(const std::vector<std::string>& args,
                           const std::map<std::string, std::string>& extra_env,
                           std::string log_path)
    : log_path_(std::move(log_path)) {
  std::vector<std::string> argv_s{std::string(DDP_BINARY_DIR) + "/ddplaunch"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    if (extra_env.count(entry.substr(0, entry.find('='))) == 0) env_s.push_back(entry);
  }
  for (const auto& [k, v] : extra_env) env_s.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  const int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    throw std::runtime_error("posix_spawn " + argv_s[0] + " failed: " + std::to_string(rc));
}

std::optional<uint16_t> health_endpoint_port(const AgentProcess& agent,
                                             std::chrono::milliseconds guard) {
  if (!agent.wait_for_log("health endpoint on", guard)) return std::nullopt;
  std::smatch match;
  const auto log = agent.log();
  if (!std::regex_search(log, match,
                         std::regex(R"(health endpoint on http://127\.0\.0\.1:(\d+))"))) {
    return std::nullopt;
  }
  return static_cast<uint16_t>(std::stoi(match[1]));
}

ProcessResult run_ddplaunch(const std::vector<std::string>& args,
                            const std::map<std::string, std::string>& env,
                            std::chrono::milliseconds guard) {
  ChildOptions options;
  options.argv = {std::string(DDP_BINARY_DIR) + "/ddplaunch"};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.env = env;
  options.merge_stderr = true;
  options.own_process_group = true;
  return run_process(options, guard);
}

AgentProcess::~AgentProcess() {
  if (!status_) {
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
  }
}

std::optional<int> AgentProcess::wait(std::chrono::milliseconds guard) {
  const auto deadline = std::chrono::steady_clock::now() + guard;
  while (!status_) {
    int st = 0;
    const pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return status_;
}

void AgentProcess::kill(int sig) {
  if (!status_) ::kill(pid_, sig);
}

std::string AgentProcess::log() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool AgentProcess::wait_for_log(const std::string& text, std::chrono::milliseconds guard) const {
  const auto deadline = std::chrono::steady_clock::now() + guard;
  while (log().find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  auto* raw = reinterpret_cast<sockaddr*>(&addr);
  if (::bind(fd, raw, sizeof(addr)) != 0 || ::getsockname(fd, raw, &len) != 0) {
    ::close(fd);
    throw std::runtime_error("free_port: bind failed");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string make_temp_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp != nullptr ? tmp : "/tmp") + "/ddp_multinode_XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  return templ;
}

std::set<int> ranks_in(const std::string& log, int world_size) {
  std::set<int> ranks;
  const std::regex re("WORKER RANK=(\\d+) .*WORLD_SIZE=" + std::to_string(world_size) + " ");
  for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end; ++it) {
    ranks.insert(std::stoi((*it)[1]));
  }
  return ranks;
}

std::vector<nlohmann::json> events_named(const std::string& path, const std::string& name) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto event = nlohmann::json::parse(line, nullptr, false);
    if (!event.is_discarded() && event.value("event", "") == name) out.push_back(event);
  }
  return out;
}

std::vector<std::string> synthetic_train(int epochs, int slow_ms,
                                         const std::vector<std::string>& more) {
  std::vector<std::string> args{std::string(DDP_BINARY_DIR) + "/train",
                                "--data",
                                "synthetic",
                                "--synthetic_rows",
                                "1200",
                                "--synthetic_features",
                                "16",
                                "--synthetic_classes",
                                "4",
                                "--hidden",
                                "32",
                                "--batch_size",
                                "16",
                                "--epochs",
                                std::to_string(epochs),
                                "--seed",
                                "5",
                                "--log_every",
                                "1",
                                "--fault_slow_step_ms",
                                std::to_string(slow_ms)};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

}  // namespace ddp::test
