#include "launcher/hang/hang_analysis.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace ddp::launcher {

namespace {

bool stopped(const RankSnapshot& r) {
  return r.state == 'T' || r.state == 't';
}
bool uninterruptible(const RankSnapshot& r) {
  return r.state == 'D';
}
bool has_seq(const RankSnapshot& r) {
  return r.has_source && r.last.seq >= 0;
}
bool has_step(const RankSnapshot& r) {
  return r.has_source && r.last.step >= 0;
}

std::string seconds(double s) {
  if (s < 10) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.1f s", s);
    return buf;
  }
  return std::to_string(std::lround(s)) + " s";
}

std::string state_text(char state) {
  return state == 'D' ? "uninterruptible (state D)"
                      : "stopped (state " + std::string(1, state) + ")";
}

const RankSnapshot& find(const std::vector<RankSnapshot>& ranks, int rank) {
  return *std::find_if(ranks.begin(), ranks.end(),
                       [rank](const RankSnapshot& r) { return r.rank == rank; });
}

// The ranks whose key is the smallest, when not every rank has the same key.
template <class Key>
std::vector<int> behind(const std::vector<RankSnapshot>& ranks, bool (*usable)(const RankSnapshot&),
                        Key key) {
  std::vector<const RankSnapshot*> known;
  for (const auto& r : ranks) {
    if (usable(r)) known.push_back(&r);
  }
  if (known.size() < 2) return {};
  auto [lo, hi] = std::minmax_element(known.begin(), known.end(),
                                      [&](auto* a, auto* b) { return key(*a) < key(*b); });
  if (key(**lo) == key(**hi)) return {};
  std::vector<int> out;
  for (auto* r : known) {
    if (key(*r) == key(**lo)) out.push_back(r->rank);
  }
  return out;
}

std::string culprit_text(const RankSnapshot& r) {
  std::string text = "rank " + std::to_string(r.rank) + ": ";
  if (r.unheard) {
    text += "its node not heard from for " + seconds(r.unheard_s) +
            " (paused, or cut off from the job's store), ";
  }
  if (stopped(r) || uninterruptible(r)) text += state_text(r.state) + ", ";
  text += "no progress for " + seconds(r.silent_s);
  if (!r.has_source) return text + " (no progress source)";
  if (r.last.step >= 0) text += " in step " + std::to_string(r.last.step);
  if (!r.last.op.empty() && r.last.seq >= 0) {
    // "after": it left the collective and is stuck in its own work, not inside it.
    const bool inside = r.last.phase != progress::Phase::kExit;
    text += std::string(r.last.step >= 0 ? ", " : " ") + (inside ? "in" : "after") +
            " collective " + r.last.op + " #" + std::to_string(r.last.seq);
  }
  return text;
}

}  // namespace

std::string describe_position(const RankSnapshot& r) {
  if (!r.has_source) return "no progress source";
  if (!r.last.op.empty() && r.last.seq >= 0) {
    return r.last.op + " #" + std::to_string(r.last.seq);
  }
  if (r.last.step >= 0) return "step " + std::to_string(r.last.step);
  return "no progress reported";
}

std::string rank_ranges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

HangReport analyze_hang(std::vector<RankSnapshot> ranks) {
  std::sort(ranks.begin(), ranks.end(), [](auto& a, auto& b) { return a.rank < b.rank; });
  HangReport report;
  // 1. A stopped rank (SIGSTOP, a detached debugger) cannot progress: it is the cause. One in
  // state T is, even before its own clock says hung: its node's clock may have started later
  // (a re-form resets it), and a peer that waits on it would otherwise find nobody behind and
  // blame its own healthy rank. A traced one ('t': a debugger or py-spy holding it for a
  // moment) only once hung.
  // A hung rank on a node unheard is one too: its node is paused or cut off, and its peers
  // wait on it. What its own agent last wrote is stale, so that it was not found stopped
  // proves nothing.
  for (const auto& r : ranks) {
    if ((r.hung && stopped(r)) || r.state == 'T' || (r.hung && r.unheard)) {
      report.culprits.push_back(r.rank);
      if (r.hung && r.unheard) report.unheard.push_back(r.rank);
    }
  }
  // 2. The rank that entered the fewest collectives, 3. else the one at the lowest step. A
  // rank behind that still progresses is slow, not hung: named, never acted on.
  if (report.culprits.empty()) {
    auto late = behind(ranks, has_seq, [](const RankSnapshot& r) { return r.last.seq; });
    if (late.empty()) {
      late = behind(ranks, has_step, [](const RankSnapshot& r) { return r.last.step; });
    }
    for (int rank : late) (find(ranks, rank).hung ? report.culprits : report.slow).push_back(rank);
    if (!report.slow.empty()) report.culprits.clear();
  }
  // 4. Nobody behind: a rank in an uninterruptible wait (state D) breaks the tie. One sample
  // of D is weak evidence (a page fault, a log write), so it never outranks the rules above.
  if (report.culprits.empty() && report.slow.empty()) {
    for (const auto& r : ranks) {
      if (r.hung && uninterruptible(r)) report.culprits.push_back(r.rank);
    }
  }
  std::vector<std::string> parts;
  for (int s : report.slow) {
    parts.push_back("rank " + std::to_string(s) + " is behind at " +
                    describe_position(find(ranks, s)) + " but still progressing");
  }
  for (int c : report.culprits) parts.push_back(culprit_text(find(ranks, c)));
  // Victims: hung ranks that are not culprits, grouped by where they wait.
  const bool someone_named = !report.culprits.empty() || !report.slow.empty();
  std::map<std::string, std::vector<int>> waiting;
  for (const auto& r : ranks) {
    if (!r.hung || std::count(report.culprits.begin(), report.culprits.end(), r.rank) != 0) {
      continue;
    }
    report.victims.push_back(r.rank);
    if (!someone_named) continue;
    const bool inside = r.has_source && r.last.phase == progress::Phase::kEnter;
    waiting[(inside ? "wait in " : "wait at ") + describe_position(r)].push_back(r.rank);
  }
  for (auto& [where, members] : waiting) {
    const bool one = members.size() == 1;
    std::string verb = where;
    if (one) verb.insert(4, "s");  // "wait in" -> "waits in"
    parts.push_back((one ? "rank " : "ranks ") + rank_ranges(members) + " " + verb);
  }
  if (!someone_named) {
    // Nobody is behind: every hung rank sits at the same place (a hang inside a collective:
    // the network or a device), or no rank reports progress.
    std::map<std::string, std::vector<int>> at;
    double longest = 0;
    for (const auto& r : ranks) {
      if (!r.hung) continue;
      at[describe_position(r)].push_back(r.rank);
      longest = std::max(longest, r.silent_s);
    }
    std::string where;
    for (auto& [position, members] : at) {
      if (!where.empty()) where += ", ";
      where +=
          (members.size() == 1 ? "rank " : "ranks ") + rank_ranges(members) + " at " + position;
    }
    parts.push_back("no progress for " + seconds(longest) + ": " + where +
                    "; no rank is behind the others (a hang inside the collective?)");
  }
  std::string text;
  for (const auto& p : parts) text += (text.empty() ? "" : "; ") + p;
  report.text = std::move(text);
  return report;
}

}  // namespace ddp::launcher
