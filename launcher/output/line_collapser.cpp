#include "launcher/output/line_collapser.hpp"

#include <algorithm>

namespace ddp::launcher {
namespace {

std::string line_key(int stream, std::string_view text) {
  std::string key(1, static_cast<char>('0' + stream));
  key.append(text);
  return key;
}

int stream_of(const std::string& key) {
  return key.front() - '0';
}

std::string text_of(const std::string& key) {
  return key.substr(1);
}

}  // namespace

LineCollapser::LineCollapser(std::chrono::milliseconds window,
                             std::vector<std::array<bool, 2>> feeds)
    : window_(window), feeds_(std::move(feeds)), queues_(feeds_.size()) {}

std::vector<CollapsedLine> LineCollapser::add(int local_rank, int stream, std::string_view text,
                                              Clock::time_point now) {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= queues_.size()) {
    // Not a rank this console was set up for: nothing to wait for, and nothing may pass it.
    auto out = flush();
    out.push_back({stream, {local_rank}, std::string(text)});
    return out;
  }
  const auto rank = static_cast<size_t>(local_rank);
  std::string key = line_key(stream, text);
  ++where_[key][rank];
  held_bytes_ += text.size();
  ++lines_;
  queues_[rank].push_back({key, now});
  std::vector<CollapsedLine> out;
  emit_if_complete(key, out);
  auto later = release(now);
  out.insert(out.end(), later.begin(), later.end());
  return out;
}

std::vector<CollapsedLine> LineCollapser::rank_done(int local_rank, Clock::time_point now) {
  if (local_rank >= 0 && static_cast<size_t>(local_rank) < feeds_.size()) {
    feeds_[static_cast<size_t>(local_rank)] = {false, false};
  }
  return release(now);
}

std::vector<CollapsedLine> LineCollapser::due(Clock::time_point now) {
  return release(now);
}

std::vector<CollapsedLine> LineCollapser::flush() {
  return release(std::nullopt);
}

std::optional<LineCollapser::Clock::time_point> LineCollapser::next_due() const {
  std::optional<Clock::time_point> next;
  for (const auto& queue : queues_) {
    if (!queue.empty() && (!next || queue.front().since < *next)) next = queue.front().since;
  }
  if (next) *next += window_;
  return next;
}

std::optional<size_t> LineCollapser::reach(size_t rank, const std::string& key) const {
  const auto& queue = queues_[rank];
  for (size_t i = 0; i < queue.size(); ++i) {
    if (queue[i].key == key) return i;
    // A line another rank holds too may still go out with it: it must not be passed.
    if (where_.at(queue[i].key).size() > 1) return std::nullopt;
  }
  return std::nullopt;
}

void LineCollapser::pop_front(size_t rank) {
  auto& queue = queues_[rank];
  const auto& key = queue.front().key;
  auto it = where_.find(key);
  if (--it->second[rank] == 0) it->second.erase(rank);
  if (it->second.empty()) where_.erase(it);
  held_bytes_ -= key.size() - 1;
  --lines_;
  queue.pop_front();
}

std::optional<std::string> LineCollapser::blocker(size_t rank, const std::string& key) const {
  for (const auto& line : queues_[rank]) {
    if (line.key == key) return std::nullopt;
    if (where_.at(line.key).size() > 1) return line.key;
  }
  return std::nullopt;
}

void LineCollapser::emit(const std::string& key, std::vector<CollapsedLine>& out,
                         std::vector<std::string>& emitting) {
  emitting.push_back(key);
  CollapsedLine group{stream_of(key), {}, text_of(key)};
  const auto holders = where_.at(key);  // a copy: popping changes it
  for (const auto& [rank, count] : holders) {
    auto at = reach(rank, key);
    // A line this rank shares with others stands before it: that one goes out first, with
    // the others that have it, when it can (early is allowed; late is not).
    for (auto first = blocker(rank, key); !at && first; first = blocker(rank, key)) {
      if (emitting.size() >= kMaxNesting ||
          std::find(emitting.begin(), emitting.end(), *first) != emitting.end()) {
        break;
      }
      const auto before = queues_[rank].size();
      emit(*first, out, emitting);
      at = reach(rank, key);
      if (queues_[rank].size() == before) break;  // it could not go: this rank waits
    }
    if (!at) continue;
    // This rank's own lines before it first, each alone: no other rank has them.
    for (size_t i = 0; i < *at; ++i) {
      const auto& own = queues_[rank].front().key;
      out.push_back({stream_of(own), {static_cast<int>(rank)}, text_of(own)});
      pop_front(rank);
    }
    pop_front(rank);
    group.ranks.push_back(static_cast<int>(rank));
  }
  emitting.pop_back();
  if (!group.ranks.empty()) out.push_back(std::move(group));
}

bool LineCollapser::emit_if_complete(const std::string& key, std::vector<CollapsedLine>& out) {
  const auto stream = static_cast<size_t>(stream_of(key) - 1);
  const auto& holders = where_.at(key);
  bool anyone = false;
  // Holding it at all first (cheap: most lines are one rank's), then reaching it.
  for (size_t rank = 0; rank < queues_.size(); ++rank) {
    if (!feeds_[rank][stream]) continue;
    if (holders.count(rank) == 0) return false;
    anyone = true;
  }
  if (!anyone) return false;
  std::optional<Clock::time_point> first;  // when the first of its lines came
  for (size_t rank = 0; rank < queues_.size(); ++rank) {
    if (!feeds_[rank][stream]) continue;
    const auto at = reach(rank, key);
    if (!at) return false;
    const auto since = queues_[rank][*at].since;
    if (!first || since < *first) first = since;
  }
  // Lines that came before it (a rank that ended, the other stream) keep their place.
  for (;;) {
    const auto oldest = oldest_front();
    if (!oldest || queues_[*oldest].front().since >= *first) break;
    std::vector<std::string> emitting;
    emit(std::string(queues_[*oldest].front().key), out, emitting);
  }
  if (where_.count(key) != 0) {
    std::vector<std::string> emitting;
    emit(key, out, emitting);
  }
  return true;
}

std::optional<size_t> LineCollapser::oldest_front() const {
  std::optional<size_t> oldest;
  for (size_t rank = 0; rank < queues_.size(); ++rank) {
    if (queues_[rank].empty()) continue;
    if (!oldest || queues_[rank].front().since < queues_[*oldest].front().since) oldest = rank;
  }
  return oldest;
}

std::vector<CollapsedLine> LineCollapser::release(std::optional<Clock::time_point> now) {
  std::vector<CollapsedLine> out;
  for (;;) {
    // A text complete at some queue's front goes first (ranks that ended no longer count).
    bool emitted = false;
    for (size_t rank = 0; rank < queues_.size() && !emitted; ++rank) {
      if (queues_[rank].empty()) continue;
      const std::string key = queues_[rank].front().key;
      emitted = emit_if_complete(key, out);
    }
    if (emitted) continue;
    // Then the oldest line, once its window has ended (or the held text is too much).
    const auto oldest = oldest_front();
    if (!oldest) break;
    const auto& line = queues_[*oldest].front();
    const bool go = !now || *now - line.since >= window_ || held_bytes_ > kCollapseMaxHeldBytes;
    if (!go) break;
    const std::string key = line.key;
    std::vector<std::string> emitting;
    emit(key, out, emitting);
  }
  return out;
}

std::string format_rank_set(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size();) {
    size_t end = i;
    while (end + 1 < ranks.size() && ranks[end + 1] == ranks[end] + 1) ++end;
    if (!text.empty()) text += ',';
    text += std::to_string(ranks[i]);
    if (end > i) text += '-' + std::to_string(ranks[end]);
    i = end + 1;
  }
  return text;
}

}  // namespace ddp::launcher
