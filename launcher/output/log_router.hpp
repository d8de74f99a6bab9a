#pragma once
// Routes worker output to the console and log files: a per-rank prefix at the start of every
// line and of every redraw of a progress bar ('\r'), torchrun's -r/-t selection,
// --local_ranks_filter. A line still unfinished kPartialDelay after its first bytes (a
// prompt, a bar) is shown as it stands and continued when the rest comes; the console keeps
// two ranks off one line (Console::write_segment). The console is a Console: it never blocks;
// ready() says when it is congested, so the caller stops reading that worker's pipe. The
// -r/-t files get the bytes exactly as the worker wrote them, at once.
#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/config/launch_config.hpp"
#include "launcher/output/console.hpp"
#include "launcher/process/worker_spawner.hpp"

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
  // The loop whose timer shows partial lines after kPartialDelay; null: only flush_stale()
  // (tests), flush() and kMaxLineBytes do.
  boost::asio::io_context* io = nullptr;
};

// An unfinished line is shown this long after its first bytes arrived (a C program's 4 KiB
// stdio buffer splits lines, and the rest normally follows at once).
inline constexpr std::chrono::milliseconds kPartialDelay{100};

// A worker line still without a newline at this size is routed as it stands.
inline constexpr size_t kMaxLineBytes = size_t{1} << 20;
// stderr lines kept per worker for the failure summary (each cut at 512 bytes).
inline constexpr size_t kStderrTailLines = 40;

class LogRouter {
 public:
  explicit LogRouter(LogRouterOptions options);
  ~LogRouter();
  LogRouter(const LogRouter&) = delete;
  LogRouter& operator=(const LogRouter&) = delete;

  // Starts routing for a new attempt: prefixes use rank_offset + local_rank; when
  // attempt_dir is set, the selected streams of rank r go to attempt_dir/r/std{out,err}.log
  // and lines matching a filter to attempt_dir/filtered_std{out,err}.log.
  // Throws Error naming the file when one cannot be created.
  void begin_attempt(int nproc, int rank_offset,
                     const std::optional<std::filesystem::path>& attempt_dir);
  // Bytes from a worker's stream (1 stdout, 2 stderr): written to its file at once; complete
  // lines and '\r' redraws go to the console now, an unfinished line after kPartialDelay (or
  // once it reaches kMaxLineBytes). Never blocks on the console.
  void write(int local_rank, int stream, std::string_view bytes);
  // Writes out a worker's unfinished last lines (with a newline added on the console).
  void flush(int local_rank);
  // Shows every unfinished line whose first bytes came kPartialDelay or more before now.
  void flush_stale(std::chrono::steady_clock::time_point now);
  // False while the console this stream goes to is congested (SlowConsole::kBlock): read no
  // more of it until the console's room listener fires.
  [[nodiscard]] bool ready(int local_rank, int stream) const;
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
    std::string partial;  // bytes after the last newline or '\r', not shown yet
    std::chrono::steady_clock::time_point partial_since;  // when partial got its first byte
    bool open = false;  // part of the current line was shown already (flush_stale)
    bool to_console = false;
    std::FILE* file = nullptr;
  };
  struct RankState {
    std::string prefix;
    std::array<StreamState, 2> streams;
    std::deque<std::string> stderr_tail;
  };
  void emit(int local_rank, int stream, std::string_view line, SegmentEnd end);
  // Arms the timer for the oldest partial line, if any (and an io was given).
  void arm_partial_timer();
  // Writes prefix + line to the stream's filtered file when the line matches a filter.
  void duplicate_filtered(int stream, const std::string& prefix, std::string_view line);

  LogRouterOptions options_;
  std::vector<RankState> ranks_;
  std::array<std::FILE*, 2> filtered_{};  // filtered_stdout.log, filtered_stderr.log
  std::unique_ptr<boost::asio::steady_timer> partial_timer_;
  bool partial_timer_armed_ = false;
};

// A worker's callbacks that route its output (as local_rank) through logs and its exit to
// on_exit.
WorkerCallbacks routed_to(LogRouter& logs, int local_rank, std::function<void(ExitStatus)> on_exit);

}  // namespace ddp::launcher
