#include "test_support.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;  // NOLINT: POSIX

namespace ddp::worker_runtime::test {

void run_ranks(int world, const std::function<void(int rank)>& fn) {
  std::vector<std::thread> threads;
  std::mutex mu;
  std::exception_ptr first;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!first) {
          first = std::current_exception();
        }
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  if (first) {
    std::rethrow_exception(first);
  }
}

std::mutex& catch_mutex() {
  static std::mutex mu;
  return mu;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

Child::Child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
             const std::string& log_path) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    const auto eq = entry.find('=');
    if (eq != std::string::npos) {
      merged[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
  }
  for (const auto& [k, v] : env) {
    merged[k] = v;
  }
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : merged) {
    env_strings.push_back(k + "=" + v);
  }
  std::vector<char*> envp;
  for (auto& s : env_strings) {
    envp.push_back(s.data());
  }
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (auto& s : args) {
    argp.push_back(s.data());
  }
  argp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  const int rc = posix_spawn(&pid_, argp[0], &actions, nullptr, argp.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    throw std::runtime_error("posix_spawn " + args[0] + " failed: " + std::to_string(rc));
  }
}

Child::~Child() {
  if (!reaped_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
}

int Child::wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, &status, 0);
  reaped_ = true;
  return -1;
}

TempDir::TempDir() {
  std::random_device rd;
  path_ = std::filesystem::temp_directory_path() /
          ("ddp_rt_test_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string run_command(const std::string& command, int* status) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    throw std::runtime_error("popen failed: " + command);
  }
  std::string out;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) {
    out.append(buf, n);
  }
  const int st = ::pclose(pipe);
  if (status != nullptr) {
    *status = st;
  }
  return out;
}

bool have_torch() {
  int status = 0;
  run_command("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1", &status);
  return status == 0;
}

int exit_code(int status) {
  if (status < 0) {
    return -1;
  }
  if (WIFEXITED(status)) {
    return WEXITSTATUS(status);
  }
  if (WIFSIGNALED(status)) {
    return 128 + WTERMSIG(status);
  }
  return -1;
}

std::unique_ptr<GlooProcessGroup> make_group(std::shared_ptr<rendezvous::Store> store, int rank,
                                             int world, rendezvous::Duration connect_timeout,
                                             size_t direct_max_bytes) {
  GlooOptions o;
  o.rank = rank;
  o.size = world;
  o.timeout = std::chrono::seconds(20);
  o.connect_timeout = connect_timeout;
  o.bind_addr = "127.0.0.1";
  o.direct_max_bytes = direct_max_bytes;
  return std::make_unique<GlooProcessGroup>(std::move(store), o);
}

}  // namespace ddp::worker_runtime::test
