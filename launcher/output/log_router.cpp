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

}  // namespace

LogRouter::LogRouter(LogRouterOptions options) : options_(std::move(options)) {
  if (options_.io != nullptr) {
    partial_timer_ = std::make_unique<boost::asio::steady_timer>(*options_.io);
  }
}

LogRouter::~LogRouter() {
  end_attempt();
  if (partial_timer_) partial_timer_->cancel();
}

std::string LogRouter::expand_prefix(const std::string& templ, const std::string& role, int rank,
                                     int local_rank) {
  std::string prefix = templ;
  replace_all(prefix, "${role_name}", role);
  replace_all(prefix, "${rank}", std::to_string(rank));
  replace_all(prefix, "${local_rank}", std::to_string(local_rank));
  if (prefix.find("${hostname}") != std::string::npos) {
    // torchrun 2.15's macro: the host name as socket.gethostname() gives it.
    std::array<char, 256> host{};
    if (::gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
    replace_all(prefix, "${hostname}", host.data());
  }
  return prefix;
}

void LogRouter::begin_attempt(int nproc, int rank_offset,
                              const std::optional<std::filesystem::path>& attempt_dir) {
  end_attempt();
  ranks_.assign(static_cast<size_t>(nproc), RankState{});
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
}

void LogRouter::write(int local_rank, int stream, std::string_view bytes) {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= ranks_.size()) return;
  auto& state = ranks_[static_cast<size_t>(local_rank)].streams[stream == 1 ? 0 : 1];
  if (state.file != nullptr) {
    // The file is the worker's stream as it wrote it (bar redraws included), kept current.
    std::fwrite(bytes.data(), 1, bytes.size(), state.file);
    std::fflush(state.file);
  }
  const bool had_partial = !state.partial.empty();
  for (;;) {
    auto end = bytes.find_first_of("\r\n");
    if (end == std::string_view::npos) break;
    // "\r\n" (in one read) is a newline, not a redraw.
    const bool carriage = bytes[end] == '\r' && !(end + 1 < bytes.size() && bytes[end + 1] == '\n');
    const size_t text_end = end;
    if (bytes[end] == '\r' && !carriage) ++end;
    const auto kind = carriage ? SegmentEnd::kCarriage : SegmentEnd::kNewline;
    if (state.partial.empty()) {
      emit(local_rank, stream, bytes.substr(0, text_end), kind);
    } else {
      state.partial.append(bytes.substr(0, text_end));
      std::string segment = std::move(state.partial);
      state.partial.clear();
      emit(local_rank, stream, segment, kind);
    }
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
    emit(local_rank, stream, segment, SegmentEnd::kOpen);
  }
  if (!had_partial && !state.partial.empty()) arm_partial_timer();
}

void LogRouter::flush(int local_rank) {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= ranks_.size()) return;
  for (int stream : {1, 2}) {
    auto& state = ranks_[static_cast<size_t>(local_rank)].streams[stream - 1];
    if (state.partial.empty() && !state.open) continue;
    std::string line = std::move(state.partial);
    state.partial.clear();
    emit(local_rank, stream, line, SegmentEnd::kNewline);
  }
}

void LogRouter::flush_stale(std::chrono::steady_clock::time_point now) {
  for (size_t local_rank = 0; local_rank < ranks_.size(); ++local_rank) {
    for (int stream : {1, 2}) {
      auto& state = ranks_[local_rank].streams[stream - 1];
      if (state.partial.empty() || now - state.partial_since < kPartialDelay) continue;
      std::string segment = std::move(state.partial);
      state.partial.clear();
      emit(static_cast<int>(local_rank), stream, segment, SegmentEnd::kOpen);
    }
  }
}

bool LogRouter::ready(int local_rank, int stream) const {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= ranks_.size()) return true;
  const auto& state = ranks_[static_cast<size_t>(local_rank)].streams[stream == 1 ? 0 : 1];
  Console* console = stream == 1 ? options_.stdout_console : options_.stderr_console;
  return !state.to_console || console == nullptr || !console->congested();
}

void LogRouter::arm_partial_timer() {
  if (!partial_timer_ || partial_timer_armed_) return;
  auto oldest = std::chrono::steady_clock::time_point::max();
  for (const auto& rank : ranks_) {
    for (const auto& state : rank.streams) {
      if (!state.partial.empty()) oldest = std::min(oldest, state.partial_since);
    }
  }
  if (oldest == std::chrono::steady_clock::time_point::max()) return;
  partial_timer_armed_ = true;
  partial_timer_->expires_at(oldest + kPartialDelay);
  partial_timer_->async_wait([this](boost::system::error_code ec) {
    if (ec) return;  // cancelled: the router is going away
    partial_timer_armed_ = false;
    flush_stale(std::chrono::steady_clock::now());
    arm_partial_timer();
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

void LogRouter::emit(int local_rank, int stream, std::string_view line, SegmentEnd end) {
  auto& rank = ranks_[static_cast<size_t>(local_rank)];
  auto& state = rank.streams[stream == 1 ? 0 : 1];
  state.open = end == SegmentEnd::kOpen;
  if (stream == 2 && !line.empty()) {
    rank.stderr_tail.emplace_back(line.substr(0, 512));
    if (rank.stderr_tail.size() > kStderrTailLines) rank.stderr_tail.pop_front();
  }
  if (!line.empty()) duplicate_filtered(stream, rank.prefix, line);
  Console* console = stream == 1 ? options_.stdout_console : options_.stderr_console;
  if (state.to_console && console != nullptr) {
    console->write_segment(local_rank * 2 + (stream == 1 ? 0 : 1), rank.prefix, line, end);
  }
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
