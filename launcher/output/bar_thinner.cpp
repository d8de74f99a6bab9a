#include "launcher/output/bar_thinner.hpp"

namespace ddp::launcher {

bool is_blank(std::string_view text) {
  return text.find_first_not_of(" \t") == std::string_view::npos;
}

BarThinner::BarThinner(std::chrono::milliseconds interval) : interval_(interval) {}

std::optional<std::string> BarThinner::update(int source, std::string_view state,
                                              Clock::time_point now) {
  if (is_blank(state)) return std::nullopt;
  Bar& bar = bars_[source];
  if (bar.printed_at && bar.printed == state) {
    bar.held.reset();  // shown already (a state seen unfinished, then ended by its '\r')
    return std::nullopt;
  }
  if (bar.printed_at && now - *bar.printed_at < interval_) {
    bar.held = std::string(state);
    return std::nullopt;
  }
  bar.printed_at = now;
  bar.printed = std::string(state);
  bar.held.reset();
  return bar.printed;
}

std::optional<std::string> BarThinner::finish(int source, std::string_view final_state) {
  auto it = bars_.find(source);
  std::optional<std::string> out;
  if (!is_blank(final_state)) {
    if (it == bars_.end() || it->second.printed != final_state) out = std::string(final_state);
  } else if (it != bars_.end() && it->second.held) {
    out = std::move(it->second.held);
  }
  if (it != bars_.end()) bars_.erase(it);
  return out;
}

std::vector<std::pair<int, std::string>> BarThinner::due(Clock::time_point now) {
  std::vector<std::pair<int, std::string>> out;
  for (auto& [source, bar] : bars_) {
    if (!bar.held || now - *bar.printed_at < interval_) continue;
    bar.printed_at = now;
    bar.printed = std::move(*bar.held);
    bar.held.reset();
    out.emplace_back(source, bar.printed);
  }
  return out;
}

std::optional<BarThinner::Clock::time_point> BarThinner::next_due() const {
  std::optional<Clock::time_point> next;
  for (const auto& [source, bar] : bars_) {
    if (!bar.held) continue;
    const auto at = *bar.printed_at + interval_;
    if (!next || at < *next) next = at;
  }
  return next;
}

}  // namespace ddp::launcher
