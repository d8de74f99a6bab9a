// launch_bench: times a launcher (ddplaunch or torchrun) on one node.
//   launch_bench restart RUNS WORKERS -- LAUNCHER-ARGS...   crash-to-every-worker-restarted
//   launch_bench rss -- LAUNCHER-ARGS...                   the launcher's peak RSS
// LAUNCHER-ARGS is the full launcher command; for `restart` it must run launch_bench_worker
// with one restart allowed. Prints one line of results (milliseconds / KiB).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

long long read_ns(const std::filesystem::path& path) {
  std::ifstream in(path);
  long long ns = -1;
  in >> ns;
  return ns;
}

// Runs argv with BENCH_DIR=dir and stdout/stderr to /dev/null; returns the rusage.
rusage run(const std::vector<std::string>& args, const std::filesystem::path& dir, int& status) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("BENCH_DIR", dir.c_str(), 1);
    std::FILE* null = std::fopen("/dev/null", "w");
    ::dup2(::fileno(null), 1);
    ::dup2(::fileno(null), 2);
    std::vector<char*> argv;
    for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  rusage usage{};
  ::wait4(pid, &status, 0, &usage);
  return usage;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

int usage() {
  std::fprintf(stderr,
               "usage: launch_bench restart RUNS WORKERS -- LAUNCHER...\n"
               "       launch_bench rss -- LAUNCHER...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto dashes = std::find(args.begin(), args.end(), "--");
  if (args.empty() || dashes == args.end() || dashes + 1 == args.end()) return usage();
  std::vector<std::string> command(dashes + 1, args.end());
  auto dir =
      std::filesystem::temp_directory_path() / ("launch_bench_" + std::to_string(::getpid()));

  if (args[0] == "rss") {
    std::filesystem::create_directories(dir);
    int status = 0;
    rusage usage = run(command, dir, status);
    std::filesystem::remove_all(dir);
    // ru_maxrss covers the launcher and the children it reaped; with /bin/true workers
    // (about 1 MiB each) the maximum is the launcher's own.
    std::printf("peak_rss_kib=%ld exit=%d\n", usage.ru_maxrss, WEXITSTATUS(status));
    return 0;
  }
  if (args[0] == "restart" && args.size() >= 4) {
    int runs = std::atoi(args[1].c_str());
    int workers = std::atoi(args[2].c_str());
    std::vector<double> restart_ms;
    for (int i = 0; i < runs; ++i) {
      std::filesystem::remove_all(dir);
      std::filesystem::create_directories(dir);
      int status = 0;
      run(command, dir, status);
      long long crash = read_ns(dir / "crash");
      long long last_start = -1;
      for (int r = 0; r < workers; ++r) {
        last_start = std::max(last_start, read_ns(dir / ("start_" + std::to_string(r))));
      }
      if (crash < 0 || last_start < 0 || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "run %d: the launcher did not restart every worker (exit %d)\n", i,
                     WEXITSTATUS(status));
        continue;
      }
      restart_ms.push_back(static_cast<double>(last_start - crash) / 1e6);
    }
    std::filesystem::remove_all(dir);
    if (restart_ms.empty()) return 1;
    std::printf("crash_to_restarted_ms median=%.2f min=%.2f max=%.2f runs=%zu\n",
                median(restart_ms), *std::min_element(restart_ms.begin(), restart_ms.end()),
                *std::max_element(restart_ms.begin(), restart_ms.end()), restart_ms.size());
    return 0;
  }
  return usage();
}
