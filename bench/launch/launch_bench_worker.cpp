// The worker launch_bench times. Attempt 0: every rank marks itself started; local rank 0
// waits for all of them, writes the crash time and exits 1; the others wait to be stopped.
// Attempt 1: every rank writes the time it started running and exits 0.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

void write_now(const std::filesystem::path& path) {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now).count();
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) std::exit(2);
  std::fprintf(file, "%lld\n", static_cast<long long>(ns));
  std::fclose(file);
}

}  // namespace

int main() {
  std::filesystem::path dir = env_or("BENCH_DIR", "/tmp");
  std::string rank = env_or("LOCAL_RANK", "0");
  int world = std::stoi(env_or("LOCAL_WORLD_SIZE", "1"));
  if (env_or("TORCHELASTIC_RESTART_COUNT", "0") != "0") {
    write_now(dir / ("start_" + rank));
    return 0;
  }
  write_now(dir / ("ready_" + rank));
  if (rank != "0") {
    ::pause();  // until the agent stops us
    return 0;
  }
  for (int i = 0; i < 60000; ++i) {  // at most 60 s
    bool all = true;
    for (int r = 0; r < world; ++r)
      all = all && std::filesystem::exists(dir / ("ready_" + std::to_string(r)));
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  write_now(dir / "crash");
  return 1;
}
