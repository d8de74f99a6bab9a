#include "launcher/hang/hang_detector.hpp"

#include <algorithm>

namespace ddp::launcher {

namespace {

bool is_stopped(char state) {
  return state == 'T' || state == 't';
}

bool same_place(const progress::Report& a, const progress::Report& b) {
  return a.step == b.step && a.seq == b.seq && a.phase == b.phase && a.op == b.op;
}

}  // namespace

void HangDetector::reset(const std::vector<std::pair<int, int>>& rank_pids, Clock::time_point now) {
  ranks_.clear();
  for (auto [rank, pid] : rank_pids) {
    Tracked t;
    t.rank = rank;
    t.pid = pid;
    t.moved = now;
    ranks_.push_back(t);
  }
}

bool HangDetector::on_progress(const progress::Report& report, Clock::time_point now) {
  auto it = std::find_if(ranks_.begin(), ranks_.end(),
                         [&](const Tracked& t) { return report.pid > 0 && t.pid == report.pid; });
  if (it == ranks_.end()) {
    it = std::find_if(ranks_.begin(), ranks_.end(),
                      [&](const Tracked& t) { return report.rank >= 0 && t.rank == report.rank; });
  }
  if (it == ranks_.end()) return false;
  if (!it->has_source || !same_place(it->last, report)) it->moved = now;
  it->has_source = true;
  it->last = report;
  return true;
}

void HangDetector::on_state(int pid, char state, Clock::time_point now) {
  for (auto& t : ranks_) {
    if (t.pid != pid) continue;
    if (is_stopped(state) && !is_stopped(t.state)) t.stopped_since = now;
    t.state = state;
  }
}

void HangDetector::forget(int pid) {
  ranks_.erase(std::remove_if(ranks_.begin(), ranks_.end(),
                              [pid](const Tracked& t) { return t.pid == pid; }),
               ranks_.end());
}

std::vector<int> HangDetector::pids() const {
  std::vector<int> out;
  for (const auto& t : ranks_) out.push_back(t.pid);
  return out;
}

bool HangDetector::hung(const Tracked& t, Clock::time_point now) const {
  if (t.has_source) return now - t.moved >= timeout_;
  return is_stopped(t.state) && now - t.stopped_since >= timeout_;
}

std::vector<RankSnapshot> HangDetector::snapshot(Clock::time_point now) const {
  std::vector<RankSnapshot> out;
  for (const auto& t : ranks_) {
    RankSnapshot s;
    s.rank = t.rank;
    s.has_source = t.has_source;
    s.last = t.last;
    const auto since = t.has_source || !is_stopped(t.state) ? t.moved : t.stopped_since;
    s.silent_s = std::chrono::duration<double>(now - since).count();
    s.state = t.state;
    s.hung = hung(t, now);
    out.push_back(s);
  }
  return out;
}

bool HangDetector::any_hung(Clock::time_point now) const {
  return std::any_of(ranks_.begin(), ranks_.end(), [&](const Tracked& t) { return hung(t, now); });
}

}  // namespace ddp::launcher
