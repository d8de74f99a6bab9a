#pragma once
// Routes worker output to the console and log files: a per-rank prefix at the start of every
// line, torchrun's -r/-t selection, --local_ranks_filter. Whole lines may be collapsed across
// ranks by the console (--log_collapse, line_collapser.hpp). A progress bar ('\r' redraws)
// is shown as --progress_bars says: in the console's live area on a terminal, thinned to a few
// lines in a pipe or file (bar_thinner.hpp), or redrawn in place as written (raw). A line
// still unfinished kPartialDelay after its first bytes (a prompt) is shown as it stands: in the
// live area, or continued on the console when the rest comes; the console keeps two ranks off
// one line (Console::write_segment). The console is a Console: it never blocks; ready() says
// when it is congested, so the caller stops reading that worker's pipe. The -r/-t files get
// the bytes exactly as the worker wrote them, at once.
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
#include "launcher/output/bar_thinner.hpp"
#include "launcher/output/console.hpp"
#include "launcher/output/line_collapser.hpp"
#include "launcher/process/worker_spawner.hpp"

namespace ddp::launcher {

// How '\r' progress bars reach the console (--progress_bars).
enum class ProgressBars {
  kAuto,  // a terminal: each rank's bar in the live area; a pipe or file: thinned
  kThin,  // thinned wherever the console goes
  kRaw,   // every redraw as written, in place on the console's current line
};

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
  // Identical whole lines of several ranks within kCollapseWindow print once (--log_collapse).
  bool collapse = true;
  std::chrono::milliseconds collapse_window = kCollapseWindow;
  ProgressBars progress_bars = ProgressBars::kAuto;
  std::chrono::milliseconds bar_interval = kBarInterval;  // a thinned bar's line interval
  // The loop whose timer shows partial lines after kPartialDelay (and thinned bars' held
  // states); null: only flush_stale() (tests), flush() and kMaxLineBytes do.
  boost::asio::io_context* io = nullptr;
};

// An unfinished line is shown this long after its first bytes arrived (a C program's 4 KiB
// stdio buffer splits lines, and the rest normally follows at once).
inline constexpr std::chrono::milliseconds kPartialDelay{100};

// A worker line still without a newline at this size is routed as it stands.
inline constexpr size_t kMaxLineBytes = size_t{1} << 20;
// stderr lines kept per worker for the failure summary (each cut at 512 bytes).
inline constexpr size_t kStderrTailLines = 40;
// Lines (both streams) kept per worker for the job page (each cut at 512 bytes).
inline constexpr size_t kRecentLines = 20;

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
  // Shows every unfinished line whose first bytes came kPartialDelay or more before now, and
  // the thinned bars' held states whose interval has ended.
  void flush_stale(std::chrono::steady_clock::time_point now);
  // False while the console this stream goes to is congested (SlowConsole::kBlock): read no
  // more of it until the console's room listener fires.
  [[nodiscard]] bool ready(int local_rank, int stream) const;
  // Flushes every rank and closes the attempt's files.
  void end_attempt();
  // The last stderr lines of a worker in this attempt (at most kStderrTailLines), for the
  // failure summary: where a dying worker's traceback or backtrace is.
  [[nodiscard]] std::vector<std::string> stderr_tail(int local_rank) const;
  // The last whole lines of a worker in this attempt, both streams (at most kRecentLines).
  [[nodiscard]] std::vector<std::string> recent_lines(int local_rank) const;
  // A worker's latest progress bar state (or unfinished line shown), "" when none.
  [[nodiscard]] std::string progress(int local_rank) const;
  // The prefix template with ${role_name}, ${rank}, ${local_rank} and ${hostname} replaced.
  [[nodiscard]] static std::string expand_prefix(const std::string& templ, const std::string& role,
                                                 int rank, int local_rank);
  // The prefix of a line several local ranks printed: ${local_rank} and ${rank} become their
  // sets ("0-7", "8-15"), as format_rank_set writes them.
  [[nodiscard]] static std::string expand_group_prefix(const std::string& templ,
                                                       const std::string& role, int rank_offset,
                                                       const std::vector<int>& local_ranks);

 private:
  // How one stream's bars and unfinished lines reach its console.
  enum class Display { kLive, kThin, kRaw };
  struct StreamState {
    std::string partial;  // bytes after the last newline or '\r', not consumed yet
    std::chrono::steady_clock::time_point partial_since;  // when partial was last new to show
    size_t partial_shown = 0;  // live, or a bar's state: partial's size when last shown
    std::string head;          // raw/thin: the part of the current line shown already (kOpen)
    bool in_bar = false;       // the current line was redrawn with '\r'
    bool live_shown = false;   // it has a line in the console's live area
    bool to_console = false;
    Display display = Display::kRaw;
    std::FILE* file = nullptr;
  };
  struct RankState {
    std::string prefix;
    std::array<StreamState, 2> streams;
    std::deque<std::string> stderr_tail;
    std::deque<std::string> recent;
    std::string progress;
  };
  [[nodiscard]] Console* console_of(int stream) const;
  // A segment of a stream that ended in a newline or a '\r' (write()), or a worker's last
  // unfinished line (flush(): kOpen).
  void on_segment(int local_rank, int stream, std::string_view text, SegmentEnd end);
  // A whole line ended: what the summary, the job page and the filtered files keep.
  void keep_line(int local_rank, int stream, std::string_view line);
  // A bar's state: to the live area, the thinner, or the console as written.
  void on_bar_state(int local_rank, int stream, std::string_view state);
  // The end of a line that was a bar (its newline, or the worker's exit).
  void end_bar(int local_rank, int stream, std::string_view final_state);
  // An unfinished line kPartialDelay old: shown as it stands.
  void show_partial(int local_rank, int stream);
  // Text of an unfinished line written on the console, the line left open; the rest of the
  // line continues it (head).
  void show_open(int local_rank, int stream, std::string_view text);
  // Whole lines go to the console's collapser; a line whose head was shown continues it.
  void console_line(int local_rank, int stream, std::string_view line);
  // Arms the timer for the oldest partial line or held bar state, if any (and an io was given).
  void arm_timer();
  // Writes prefix + line to the stream's filtered file when the line matches a filter.
  void duplicate_filtered(int stream, const std::string& prefix, std::string_view line);
  // Starts the consoles' collapsing for this attempt's ranks.
  void begin_collapse(int rank_offset);

  LogRouterOptions options_;
  std::vector<RankState> ranks_;
  std::array<std::FILE*, 2> filtered_{};  // filtered_stdout.log, filtered_stderr.log
  BarThinner thinner_;
  std::unique_ptr<boost::asio::steady_timer> timer_;
  bool timer_armed_ = false;
  std::chrono::steady_clock::time_point armed_for_;  // the armed timer's deadline
};

// A worker's callbacks that route its output (as local_rank) through logs and its exit to
// on_exit.
WorkerCallbacks routed_to(LogRouter& logs, int local_rank, std::function<void(ExitStatus)> on_exit);

}  // namespace ddp::launcher
