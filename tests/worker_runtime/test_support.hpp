#pragma once
// Helpers shared by the worker_runtime tests: ranks in threads over one store, child
// processes that are always reaped (SIGKILL on scope exit), temp directories, python.
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rendezvous/store.hpp"
#include "worker_runtime/gloo_process_group.hpp"

namespace ddp::worker_runtime::test {

// Runs fn(rank) on `world` threads; rethrows the first exception after all joined.
void run_ranks(int world, const std::function<void(int rank)>& fn);

// Catch2 v2 assertions are not thread-safe: rank threads wrap them in RT_LOCKED(...).
// Never put a collective inside: the other ranks could not join it while the lock is held.
std::mutex& catch_mutex();
#define RT_LOCKED(...)                                                                \
  do {                                                                                \
    std::lock_guard<std::mutex> rt_lock_(::ddp::worker_runtime::test::catch_mutex()); \
    __VA_ARGS__;                                                                      \
  } while (false)

// A Gloo group (rank of world) over store on 127.0.0.1, with a 20 s collective timeout.
std::unique_ptr<GlooProcessGroup> make_group(
    std::shared_ptr<rendezvous::Store> store, int rank, int world,
    rendezvous::Duration connect_timeout = std::chrono::seconds(20),
    size_t direct_max_bytes = 4 << 20);

// Runs fn; returns the what() of the exception it threw, or "" when it returned.
std::string error_of(const std::function<void()>& fn);

// A child process (posix_spawn), killed with SIGKILL and reaped on destruction.
class Child {
 public:
  // Starts argv[0] with the current environment plus `env`; stdout+stderr go to log_path.
  Child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
        const std::string& log_path);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // Waits up to timeout for the exit; returns the wait status, or kills it and returns -1.
  int wait(std::chrono::milliseconds timeout);
  [[nodiscard]] pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// A fresh directory under the system temp dir, removed on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// The whole file as a string ("" when missing).
std::string read_file(const std::filesystem::path& path);
// Runs a shell command; returns its stdout, sets *status to the wait status.
std::string run_command(const std::string& command, int* status);
// True when /usr/bin/python3 can import torch.
bool have_torch();

// Exit code of a wait status, or 128 + signal.
int exit_code(int status);

}  // namespace ddp::worker_runtime::test
