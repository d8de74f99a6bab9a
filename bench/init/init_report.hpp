#pragma once
// What init_bench prints: per phase, the time until the last rank was through it (the wave)
// and the spread of each rank's own time in it; one key=value line for the drivers
// (scripts/bench/init.sh) and a markdown table for people.
#include <string>

#include "init_load.hpp"

namespace ddp::bench {

struct PhaseStats {
  double wave_s = 0;  // start until the last rank finished the phase
  double p50_ms = 0;  // of each rank's time in the phase
  double p99_ms = 0;
  double max_ms = 0;
};

struct InitSummary {
  int ranks = 0;
  double seconds = 0;
  double client_cpu_s = 0;
  double server_cpu_s = -1;  // -1: not measured
  PhaseStats connect, init, exchange, barrier;
};

InitSummary summarize(const InitLoadResult& result);
// "init ranks=N seconds=S connect_wave_s=... connect_p50_ms=... ... client_cpu_s=C".
std::string summary_line(const InitSummary& summary);
// | phase | all through (s) | p50 (ms) | p99 (ms) | max (ms) |
std::string summary_table(const InitSummary& summary);

}  // namespace ddp::bench
