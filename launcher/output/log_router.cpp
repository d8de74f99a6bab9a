#include "launcher/output/log_router.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>

#include "common/error.hpp"

namespace ddp::launcher {
namespace {

void replace_all(std::string& text, const std::string& token, const std::string& value) {
  for (auto pos = text.find(token); pos != std::string::npos; pos = text.find(token, pos)) {
    text.replace(pos, token.size(), value);
    pos += value.size();
  }
}

// The template with its macros replaced by these texts.
std::string expand(const std::string& templ, const std::string& role, const std::string& rank,
                   const std::string& local_rank) {
  std::string prefix = templ;
  replace_all(prefix, "${role_name}", role);
  replace_all(prefix, "${rank}", rank);
  replace_all(prefix, "${local_rank}", local_rank);
  if (prefix.find("${hostname}") != std::string::npos) {
    // torchrun 2.15's macro: the host name as socket.gethostname() gives it.
    std::array<char, 256> host{};
    if (::gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
    replace_all(prefix, "${hostname}", host.data());
  }
  return prefix;
}

// The console's id of a worker's stream.
int source_of(int local_rank, int stream) {
  return local_rank * 2 + (stream == 1 ? 0 : 1);
}

void keep_last(std::deque<std::string>& lines, std::string_view line, size_t most) {
  lines.emplace_back(line.substr(0, 512));
  if (lines.size() > most) lines.pop_front();
}

}  // namespace

LogRouter::LogRouter(LogRouterOptions options)
    : options_(std::move(options)), thinner_(options_.bar_interval) {
  if (options_.io != nullptr) timer_ = std::make_unique<boost::asio::steady_timer>(*options_.io);
}

LogRouter::~LogRouter() {
  end_attempt();
  if (timer_) timer_->cancel();
}

std::string LogRouter::expand_prefix(const std::string& templ, const std::string& role, int rank,
                                     int local_rank) {
  return expand(templ, role, std::to_string(rank), std::to_string(local_rank));
}

std::string LogRouter::expand_group_prefix(const std::string& templ, const std::string& role,
                                           int rank_offset, const std::vector<int>& local_ranks) {
  std::vector<int> ranks;
  ranks.reserve(local_ranks.size());
  for (int local_rank : local_ranks) ranks.push_back(rank_offset + local_rank);
  return expand(templ, role, format_rank_set(ranks), format_rank_set(local_ranks));
}

Console* LogRouter::console_of(int stream) const {
  return stream == 1 ? options_.stdout_console : options_.stderr_console;
}

void LogRouter::begin_attempt(int nproc, int rank_offset,
                              const std::optional<std::filesystem::path>& attempt_dir) {
  end_attempt();
  ranks_.assign(static_cast<size_t>(nproc), RankState{});
  thinner_ = BarThinner(options_.bar_interval);
  for (int stream : {1, 2}) {
    const auto& filters = stream == 1 ? options_.stdout_filters : options_.stderr_filters;
    if (filters.empty() || !attempt_dir) continue;
    std::filesystem::create_directories(*attempt_dir);
    auto path = *attempt_dir / (stream == 1 ? "filtered_stdout.log" : "filtered_stderr.log");
    filtered_[stream - 1] = std::fopen(path.c_str(), "w");
    if (filtered_[stream - 1] == nullptr) {
      throw Error("cannot create log file " + path.string() + ": " + errno_text(errno));
    }
  }
  for (int local_rank = 0; local_rank < nproc; ++local_rank) {
    auto& rank = ranks_[static_cast<size_t>(local_rank)];
    rank.prefix = expand_prefix(options_.prefix_template, options_.role_name,
                                rank_offset + local_rank, local_rank);
    bool shown = !options_.local_ranks_filter ||
                 std::find(options_.local_ranks_filter->begin(), options_.local_ranks_filter->end(),
                           local_rank) != options_.local_ranks_filter->end();
    for (int stream : {1, 2}) {
      auto& state = rank.streams[stream - 1];
      bool redirected = options_.redirects.selects(local_rank, stream);
      bool teed = options_.tee.selects(local_rank, stream);
      state.to_console = shown && (!redirected || teed);
      const Console* console = console_of(stream);
      state.display = options_.progress_bars == ProgressBars::kRaw ? Display::kRaw
                      : options_.progress_bars == ProgressBars::kAuto && console != nullptr &&
                              console->live_area()
                          ? Display::kLive
                          : Display::kThin;
      if ((redirected || teed) && attempt_dir) {
        auto dir = *attempt_dir / std::to_string(local_rank);
        std::filesystem::create_directories(dir);
        auto path = dir / (stream == 1 ? "stdout.log" : "stderr.log");
        state.file = std::fopen(path.c_str(), "w");
        if (state.file == nullptr) {
          throw Error("cannot create log file " + path.string() + ": " + errno_text(errno));
        }
      }
    }
  }
  if (options_.collapse) begin_collapse(rank_offset);
}

void LogRouter::begin_collapse(int rank_offset) {
  GroupPrefix prefix = [templ = options_.prefix_template, role = options_.role_name,
                        rank_offset](const std::vector<int>& local_ranks) {
    return expand_group_prefix(templ, role, rank_offset, local_ranks);
  };
  Console* out = options_.stdout_console;
  Console* err = options_.stderr_console;
  // feeds[r]: which of rank r's streams reach this console.
  auto feeds_of = [&](const Console* console) {
    std::vector<std::array<bool, 2>> feeds;
    for (const auto& rank : ranks_) {
      feeds.push_back({out == console && rank.streams[0].to_console,
                       err == console && rank.streams[1].to_console});
    }
    return feeds;
  };
  if (out != nullptr) out->begin_collapse(options_.collapse_window, feeds_of(out), prefix);
  if (err != nullptr && err != out) {
    err->begin_collapse(options_.collapse_window, feeds_of(err), prefix);
  }
}

void LogRouter::write(int local_rank, int stream, std::string_view bytes) {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= ranks_.size()) return;
  auto& state = ranks_[static_cast<size_t>(local_rank)].streams[stream == 1 ? 0 : 1];
  if (state.file != nullptr) {
    // The file is the worker's stream as it wrote it (bar redraws included), kept current.
    std::fwrite(bytes.data(), 1, bytes.size(), state.file);
    std::fflush(state.file);
  }
  for (;;) {
    auto end = bytes.find_first_of("\r\n");
    if (end == std::string_view::npos) break;
    // "\r\n" (in one read) is a newline, not a redraw.
    const bool carriage = bytes[end] == '\r' && !(end + 1 < bytes.size() && bytes[end + 1] == '\n');
    const size_t text_end = end;
    if (bytes[end] == '\r' && !carriage) ++end;
    const auto kind = carriage ? SegmentEnd::kCarriage : SegmentEnd::kNewline;
    state.partial.append(bytes.substr(0, text_end));
    std::string segment = std::move(state.partial);
    state.partial.clear();
    state.partial_shown = 0;
    on_segment(local_rank, stream, segment, kind);
    bytes.remove_prefix(end + 1);
  }
  if (!bytes.empty() && state.partial.empty())
    state.partial_since = std::chrono::steady_clock::now();
  state.partial.append(bytes);
  // A worker printing without newlines must not grow the agent without bound: past this
  // size the unfinished line is shown as it stands.
  if (state.partial.size() >= kMaxLineBytes) {
    std::string segment = std::move(state.partial);
    state.partial.clear();
    state.partial_shown = 0;
    on_segment(local_rank, stream, segment, SegmentEnd::kOpen);
  }
  if (!state.partial.empty()) arm_timer();
}

void LogRouter::on_segment(int local_rank, int stream, std::string_view text, SegmentEnd end) {
  auto& rank = ranks_[static_cast<size_t>(local_rank)];
  auto& state = rank.streams[stream == 1 ? 0 : 1];
  Console* console = console_of(stream);
  if (end == SegmentEnd::kCarriage) {
    on_bar_state(local_rank, stream, text);
    return;
  }
  if (state.live_shown) {
    console->clear_live(source_of(local_rank, stream));
    state.live_shown = false;
  }
  if (state.in_bar) {
    end_bar(local_rank, stream, text);
    return;
  }
  if (end == SegmentEnd::kOpen && state.display != Display::kLive) {
    show_open(local_rank, stream, text);
    return;
  }
  keep_line(local_rank, stream, state.head + std::string(text));
  console_line(local_rank, stream, text);
}

void LogRouter::on_bar_state(int local_rank, int stream, std::string_view state_text) {
  auto& rank = ranks_[static_cast<size_t>(local_rank)];
  auto& state = rank.streams[stream == 1 ? 0 : 1];
  const int source = source_of(local_rank, stream);
  state.in_bar = true;
  const std::string full = state.head + std::string(state_text);
  if (!is_blank(full)) rank.progress = full;
  Console* console = console_of(stream);
  if (!state.to_console || console == nullptr) {
    state.head.clear();
    return;
  }
  switch (state.display) {
    case Display::kLive:
      if (!is_blank(full)) {
        console->set_live(source, rank.prefix + full);
        state.live_shown = true;
      }
      break;
    case Display::kThin:
      if (!state.head.empty()) {
        // Its start was shown as an unfinished line: this state ends that line.
        console->write_segment(source, rank.prefix, state_text, SegmentEnd::kNewline);
        (void)thinner_.update(source, full, std::chrono::steady_clock::now());
      } else if (auto line = thinner_.update(source, full, std::chrono::steady_clock::now())) {
        console->write_segment(source, rank.prefix, *line, SegmentEnd::kNewline);
      }
      arm_timer();
      break;
    case Display::kRaw:
      // Redrawn in place: the console holds the '\r' back and writes "\r" + prefix before the
      // next state.
      console->write_segment(source, rank.prefix, state_text, SegmentEnd::kCarriage);
      break;
  }
  state.head.clear();
}

void LogRouter::end_bar(int local_rank, int stream, std::string_view final_state) {
  auto& rank = ranks_[static_cast<size_t>(local_rank)];
  auto& state = rank.streams[stream == 1 ? 0 : 1];
  const int source = source_of(local_rank, stream);
  state.in_bar = false;
  const std::string full = state.head + std::string(final_state);
  if (!is_blank(full)) {
    rank.progress = full;
    keep_line(local_rank, stream, full);
  }
  const auto thinned = thinner_.finish(source, full);
  Console* console = console_of(stream);
  if (state.to_console && console != nullptr) {
    switch (state.display) {
      case Display::kLive:
        if (!is_blank(full)) console->write_line(local_rank, stream, rank.prefix, full);
        break;
      case Display::kThin:
        if (thinned) console->write_line(local_rank, stream, rank.prefix, *thinned);
        break;
      case Display::kRaw:
        console->write_segment(source, rank.prefix, final_state, SegmentEnd::kNewline);
        break;
    }
  }
  state.head.clear();
}

void LogRouter::console_line(int local_rank, int stream, std::string_view line) {
  auto& rank = ranks_[static_cast<size_t>(local_rank)];
  auto& state = rank.streams[stream == 1 ? 0 : 1];
  Console* console = console_of(stream);
  if (state.to_console && console != nullptr) {
    if (!state.head.empty()) {
      // The line's start is on the console already: this continues it.
      console->write_segment(source_of(local_rank, stream), rank.prefix, line,
                             SegmentEnd::kNewline);
    } else {
      console->write_line(local_rank, stream, rank.prefix, line);
    }
  }
  state.head.clear();
}

void LogRouter::keep_line(int local_rank, int stream, std::string_view line) {
  if (line.empty()) return;
  auto& rank = ranks_[static_cast<size_t>(local_rank)];
  if (stream == 2) keep_last(rank.stderr_tail, line, kStderrTailLines);
  keep_last(rank.recent, line, kRecentLines);
  duplicate_filtered(stream, rank.prefix, line);
}

void LogRouter::show_partial(int local_rank, int stream) {
  auto& rank = ranks_[static_cast<size_t>(local_rank)];
  auto& state = rank.streams[stream == 1 ? 0 : 1];
  if (state.display == Display::kLive || (state.display == Display::kThin && state.in_bar)) {
    // Shown where it will be replaced (the live area, or the bar's thinned states), and kept
    // whole: the line it becomes is printed once, when it ends.
    state.partial_shown = state.partial.size();
    state.partial_since = std::chrono::steady_clock::now();
    if (state.display == Display::kThin) {
      on_bar_state(local_rank, stream, state.partial);
      return;
    }
    if (state.in_bar && !is_blank(state.partial)) rank.progress = state.partial;
    Console* console = console_of(stream);
    if (state.to_console && console != nullptr) {
      console->set_live(source_of(local_rank, stream), rank.prefix + state.partial);
      state.live_shown = true;
    }
    return;
  }
  std::string segment = std::move(state.partial);
  state.partial.clear();
  state.partial_shown = 0;
  show_open(local_rank, stream, segment);
}

void LogRouter::show_open(int local_rank, int stream, std::string_view text) {
  auto& rank = ranks_[static_cast<size_t>(local_rank)];
  auto& state = rank.streams[stream == 1 ? 0 : 1];
  state.head.append(text);
  if (state.in_bar && !is_blank(state.head)) rank.progress = state.head;
  Console* console = console_of(stream);
  if (state.to_console && console != nullptr) {
    console->write_segment(source_of(local_rank, stream), rank.prefix, text, SegmentEnd::kOpen);
  }
}

void LogRouter::flush(int local_rank) {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= ranks_.size()) return;
  for (int stream : {1, 2}) {
    auto& state = ranks_[static_cast<size_t>(local_rank)].streams[stream - 1];
    if (state.partial.empty() && state.head.empty() && !state.in_bar && !state.live_shown) {
      continue;
    }
    std::string line = std::move(state.partial);
    state.partial.clear();
    state.partial_shown = 0;
    on_segment(local_rank, stream, line, SegmentEnd::kNewline);
  }
  for (Console* console : {options_.stdout_console, options_.stderr_console}) {
    if (console != nullptr) console->rank_done(local_rank);
  }
}

void LogRouter::flush_stale(std::chrono::steady_clock::time_point now) {
  for (size_t local_rank = 0; local_rank < ranks_.size(); ++local_rank) {
    for (int stream : {1, 2}) {
      auto& state = ranks_[local_rank].streams[stream - 1];
      if (state.partial.empty() || state.partial.size() == state.partial_shown ||
          now - state.partial_since < kPartialDelay) {
        continue;
      }
      show_partial(static_cast<int>(local_rank), stream);
    }
  }
  for (const auto& [source, line] : thinner_.due(now)) {
    const int local_rank = source / 2;
    const int stream = source % 2 == 0 ? 1 : 2;
    if (static_cast<size_t>(local_rank) >= ranks_.size()) continue;
    const auto& rank = ranks_[static_cast<size_t>(local_rank)];
    Console* console = console_of(stream);
    if (rank.streams[stream - 1].to_console && console != nullptr) {
      console->write_segment(source, rank.prefix, line, SegmentEnd::kNewline);
    }
  }
}

bool LogRouter::ready(int local_rank, int stream) const {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= ranks_.size()) return true;
  const auto& state = ranks_[static_cast<size_t>(local_rank)].streams[stream == 1 ? 0 : 1];
  Console* console = console_of(stream);
  return !state.to_console || console == nullptr || !console->congested();
}

void LogRouter::arm_timer() {
  if (!timer_) return;
  std::optional<std::chrono::steady_clock::time_point> next = thinner_.next_due();
  for (const auto& rank : ranks_) {
    for (const auto& state : rank.streams) {
      if (state.partial.empty() || state.partial.size() == state.partial_shown) continue;
      const auto at = state.partial_since + kPartialDelay;
      if (!next || at < *next) next = at;
    }
  }
  if (!next || (timer_armed_ && armed_for_ <= *next)) return;
  timer_armed_ = true;
  armed_for_ = *next;
  // Moving the deadline cancels the earlier wait: its handler sees operation_aborted.
  timer_->expires_at(*next);
  timer_->async_wait([this](boost::system::error_code ec) {
    if (ec) return;  // re-armed earlier, or the router is going away
    timer_armed_ = false;
    flush_stale(std::chrono::steady_clock::now());
    arm_timer();
  });
}

void LogRouter::end_attempt() {
  for (size_t local_rank = 0; local_rank < ranks_.size(); ++local_rank) {
    flush(static_cast<int>(local_rank));
    for (auto& state : ranks_[local_rank].streams) {
      if (state.file != nullptr) std::fclose(state.file);
      state.file = nullptr;
    }
  }
  ranks_.clear();
  for (Console* console : {options_.stdout_console, options_.stderr_console}) {
    if (console != nullptr) console->end_collapse();
  }
  for (auto*& file : filtered_) {
    if (file != nullptr) std::fclose(file);
    file = nullptr;
  }
}

std::vector<std::string> LogRouter::stderr_tail(int local_rank) const {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= ranks_.size()) return {};
  const auto& tail = ranks_[static_cast<size_t>(local_rank)].stderr_tail;
  return {tail.begin(), tail.end()};
}

std::vector<std::string> LogRouter::recent_lines(int local_rank) const {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= ranks_.size()) return {};
  const auto& recent = ranks_[static_cast<size_t>(local_rank)].recent;
  return {recent.begin(), recent.end()};
}

std::string LogRouter::progress(int local_rank) const {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= ranks_.size()) return "";
  return ranks_[static_cast<size_t>(local_rank)].progress;
}

void LogRouter::duplicate_filtered(int stream, const std::string& prefix, std::string_view line) {
  std::FILE* file = filtered_[stream == 1 ? 0 : 1];
  if (file == nullptr) return;
  const auto& filters = stream == 1 ? options_.stdout_filters : options_.stderr_filters;
  bool matches = std::any_of(filters.begin(), filters.end(), [&](const std::string& needle) {
    return line.find(needle) != std::string_view::npos;
  });
  if (!matches) return;
  std::fwrite(prefix.data(), 1, prefix.size(), file);
  std::fwrite(line.data(), 1, line.size(), file);
  std::fputc('\n', file);
}

WorkerCallbacks routed_to(LogRouter& logs, int local_rank,
                          std::function<void(ExitStatus)> on_exit) {
  WorkerCallbacks callbacks;
  callbacks.ready_for_output = [&logs, local_rank](int stream) {
    return logs.ready(local_rank, stream);
  };
  callbacks.on_output = [&logs, local_rank](int stream, std::string_view bytes) {
    logs.write(local_rank, stream, bytes);
  };
  callbacks.on_exit = std::move(on_exit);
  return callbacks;
}

}  // namespace ddp::launcher
