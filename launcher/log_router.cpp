#include "launcher/log_router.hpp"

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

LogRouter::~LogRouter() {
  end_attempt();
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
  for (;;) {
    auto newline = bytes.find('\n');
    if (newline == std::string_view::npos) break;
    if (state.partial.empty()) {
      emit(local_rank, stream, bytes.substr(0, newline));
    } else {
      state.partial.append(bytes.substr(0, newline));
      emit(local_rank, stream, state.partial);
      state.partial.clear();
    }
    bytes.remove_prefix(newline + 1);
  }
  state.partial.append(bytes);
  // A worker printing without newlines must not grow the agent without bound: past this
  // size the unfinished line is written out as it stands.
  if (state.partial.size() >= kMaxLineBytes) {
    emit(local_rank, stream, state.partial);
    state.partial.clear();
  }
}

void LogRouter::flush(int local_rank) {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= ranks_.size()) return;
  for (int stream : {1, 2}) {
    auto& state = ranks_[static_cast<size_t>(local_rank)].streams[stream - 1];
    if (state.partial.empty()) continue;
    std::string line = std::move(state.partial);
    state.partial.clear();
    emit(local_rank, stream, line);
  }
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

void LogRouter::emit(int local_rank, int stream, std::string_view line) {
  auto& rank = ranks_[static_cast<size_t>(local_rank)];
  auto& state = rank.streams[stream == 1 ? 0 : 1];
  if (stream == 2) {
    rank.stderr_tail.emplace_back(line.substr(0, 512));
    if (rank.stderr_tail.size() > kStderrTailLines) rank.stderr_tail.pop_front();
  }
  if (state.file != nullptr) {
    std::fwrite(line.data(), 1, line.size(), state.file);
    std::fputc('\n', state.file);
  }
  duplicate_filtered(stream, rank.prefix, line);
  Console* console = stream == 1 ? options_.stdout_console : options_.stderr_console;
  if (state.to_console && console != nullptr) {
    std::string out;
    out.reserve(rank.prefix.size() + line.size() + 1);
    out.append(rank.prefix).append(line).push_back('\n');
    console->write(out);
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

}  // namespace ddp::launcher
