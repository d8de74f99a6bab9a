#pragma once
// Routes worker output to the console and log files: whole lines only (so two ranks never
// share a line), a per-rank prefix, torchrun's -r/-t selection, --local_ranks_filter, and
// partial last lines flushed when a worker exits. The console is a Console: it never blocks,
// and drops lines (counted) when nobody reads it; the files get every line.
#include <array>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/console.hpp"
#include "launcher/launch_config.hpp"

namespace ddp::launcher {

struct LogRouterOptions {
  std::string prefix_template = "[${role_name}${local_rank}]:";
  std::string role_name = "default";
  StreamSelection redirects;  // selected streams go to files only
  StreamSelection tee;        // selected streams go to files and the console
  std::optional<std::vector<int>> local_ranks_filter;  // console shows only these ranks
  Console* stdout_console = nullptr;  // where console stdout lines go (null: nowhere)
  Console* stderr_console = nullptr;  // and stderr lines (may be the same Console)
  // Lines (of any rank, whatever -r/-t/--local_ranks_filter say) containing one of these
  // substrings are also written, prefixed, to attempt_dir/filtered_stdout.log (stderr:
  // filtered_stderr.log): torchrun 2.x's --duplicate_stdout_filters/--duplicate_stderr_filters.
  std::vector<std::string> stdout_filters;
  std::vector<std::string> stderr_filters;
};

// A worker line still without a newline at this size is routed as it stands.
inline constexpr size_t kMaxLineBytes = size_t{1} << 20;
// stderr lines kept per worker for the failure summary (each cut at 512 bytes).
inline constexpr size_t kStderrTailLines = 40;

class LogRouter {
 public:
  explicit LogRouter(LogRouterOptions options) : options_(std::move(options)) {}
  ~LogRouter();
  LogRouter(const LogRouter&) = delete;
  LogRouter& operator=(const LogRouter&) = delete;

  // Starts routing for a new attempt: prefixes use rank_offset + local_rank; when
  // attempt_dir is set, the selected streams of rank r go to attempt_dir/r/std{out,err}.log
  // and lines matching a filter to attempt_dir/filtered_std{out,err}.log.
  // Throws Error naming the file when one cannot be created.
  void begin_attempt(int nproc, int rank_offset,
                     const std::optional<std::filesystem::path>& attempt_dir);
  // Bytes from a worker's stream (1 stdout, 2 stderr); complete lines are routed now
  // (an unfinished line once it reaches kMaxLineBytes). Never blocks on the console.
  void write(int local_rank, int stream, std::string_view bytes);
  // Writes out a worker's unfinished last lines (with a newline added).
  void flush(int local_rank);
  // Flushes every rank and closes the attempt's files.
  void end_attempt();
  // The last stderr lines of a worker in this attempt (at most kStderrTailLines), for the
  // failure summary: where a dying worker's traceback or backtrace is.
  [[nodiscard]] std::vector<std::string> stderr_tail(int local_rank) const;
  // The prefix template with ${role_name}, ${rank}, ${local_rank} and ${hostname} replaced.
  [[nodiscard]] static std::string expand_prefix(const std::string& templ, const std::string& role,
                                                 int rank, int local_rank);

 private:
  struct StreamState {
    std::string partial;  // bytes after the last newline
    bool to_console = false;
    std::FILE* file = nullptr;
  };
  struct RankState {
    std::string prefix;
    std::array<StreamState, 2> streams;
    std::deque<std::string> stderr_tail;
  };
  void emit(int local_rank, int stream, std::string_view line);
  // Writes prefix + line to the stream's filtered file when the line matches a filter.
  void duplicate_filtered(int stream, const std::string& prefix, std::string_view line);

  LogRouterOptions options_;
  std::vector<RankState> ranks_;
  std::array<std::FILE*, 2> filtered_{};  // filtered_stdout.log, filtered_stderr.log
};

}  // namespace ddp::launcher
