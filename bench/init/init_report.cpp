#include "init_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

namespace ddp::bench {
namespace {

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto at =
      static_cast<size_t>(std::lround(p / 100.0 * static_cast<double>(sorted.size() - 1)));
  return sorted[at];
}

// The phase that ends at end(t) and starts where the previous one ended, begin(t).
template <typename Begin, typename End>
PhaseStats phase(const InitLoadResult& result, Begin begin, End end) {
  PhaseStats stats;
  std::vector<double> ms;
  ms.reserve(result.ranks.size());
  for (const RankTimes& t : result.ranks) {
    stats.wave_s = std::max(stats.wave_s, static_cast<double>(end(t)));
    ms.push_back((static_cast<double>(end(t)) - static_cast<double>(begin(t))) * 1e3);
  }
  std::sort(ms.begin(), ms.end());
  stats.p50_ms = percentile(ms, 50);
  stats.p99_ms = percentile(ms, 99);
  stats.max_ms = ms.empty() ? 0 : ms.back();
  return stats;
}

std::vector<std::pair<const char*, const PhaseStats*>> phases_of(const InitSummary& s) {
  return {{"connect", &s.connect},
          {"init", &s.init},
          {"exchange", &s.exchange},
          {"barrier", &s.barrier}};
}

}  // namespace

InitSummary summarize(const InitLoadResult& result) {
  InitSummary s;
  s.ranks = static_cast<int>(result.ranks.size());
  s.seconds = result.seconds;
  s.client_cpu_s = result.cpu_seconds;
  s.server_cpu_s = result.server_cpu_seconds;
  s.connect = phase(
      result, [](const RankTimes& t) { return t.connect_started; },
      [](const RankTimes& t) { return t.connected; });
  s.init = phase(
      result, [](const RankTimes& t) { return t.connected; },
      [](const RankTimes& t) { return t.initialized; });
  s.exchange = phase(
      result, [](const RankTimes& t) { return t.initialized; },
      [](const RankTimes& t) { return t.exchanged; });
  s.barrier = phase(
      result, [](const RankTimes& t) { return t.exchanged; },
      [](const RankTimes& t) { return t.done; });
  return s;
}

std::string summary_line(const InitSummary& s) {
  char part[256];
  std::snprintf(part, sizeof part, "init ranks=%d seconds=%.4f client_cpu_s=%.3f", s.ranks,
                s.seconds, s.client_cpu_s);
  std::string line = part;
  if (s.server_cpu_s >= 0) {
    std::snprintf(part, sizeof part, " server_cpu_s=%.3f", s.server_cpu_s);
    line += part;
  }
  for (const auto& [name, p] : phases_of(s)) {
    std::snprintf(part, sizeof part, " %s_wave_s=%.4f %s_p50_ms=%.3f %s_p99_ms=%.3f %s_max_ms=%.3f",
                  name, p->wave_s, name, p->p50_ms, name, p->p99_ms, name, p->max_ms);
    line += part;
  }
  return line;
}

std::string summary_table(const InitSummary& s) {
  std::string table = "| phase | all through (s) | per rank p50 (ms) | p99 (ms) | max (ms) |\n";
  table += "| --- | ---: | ---: | ---: | ---: |\n";
  for (const auto& [name, p] : phases_of(s)) {
    char row[256];
    std::snprintf(row, sizeof row, "| %s | %.3f | %.2f | %.2f | %.2f |\n", name, p->wave_s,
                  p->p50_ms, p->p99_ms, p->max_ms);
    table += row;
  }
  return table;
}

}  // namespace ddp::bench
