#pragma once
// Naming the culprit of a hang, not its victims. When one rank stops, every other rank soon
// waits inside the next collective for it, so after the hang timeout they all look silent.
// The rank that is behind (the fewest collectives entered, else the lowest step) or that is
// stopped is the culprit; the others are victims. Pure: every agent that reads the same
// snapshots (its own ranks plus the other nodes' through the store) names the same culprit.
#include <string>
#include <vector>

#include "common/progress_protocol.hpp"

namespace ddp::launcher {

// What is known of one rank when a hang is analysed.
struct RankSnapshot {
  int rank = 0;
  bool has_source = false;  // it ever reported progress (the last report is in `last`)
  progress::Report last;
  double silent_s = 0;  // seconds since its progress last moved (or since it was started)
  char state = 0;       // /proc state ('T' stopped, 'D' uninterruptible, ...), 0 unknown
  bool hung = false;    // silent (or stopped) for at least the hang timeout
  // Seconds since its node last wrote its view to the job's store (0: this node's own rank,
  // or not known); a live agent writes it every second (ProgressBoard).
  double unheard_s = 0;
  // Its node has not been heard from for long enough that its agent is not running (paused)
  // or cannot reach the store (cut off): what its ranks do now is not known.
  bool unheard = false;
};

struct HangReport {
  std::vector<int> culprits;  // hung ranks named as the cause (empty: none is behind)
  std::vector<int> victims;   // hung ranks waiting on a culprit
  // The culprits whose node is unheard: paused or cut off, which the peer tolerance decides
  // (a node silent for longer is lost), not the hang timeout.
  std::vector<int> unheard;
  // Ranks behind the others that still make progress: the others wait for a slow rank, not
  // a hung one, so nobody is acted on (a slow rank that reports is never killed).
  std::vector<int> slow;
  std::string text;  // one line: "rank 3: no progress for 60 s in step 1200, ..."
};

// Analyses the snapshots of every rank known (any order); at least one must be hung.
HangReport analyze_hang(std::vector<RankSnapshot> ranks);

// "all_reduce #5311", "step 1200" or "no progress source": where a rank last was.
std::string describe_position(const RankSnapshot& rank);
// Compact rank list: {0,1,2,5} -> "0-2,5".
std::string rank_ranges(std::vector<int> ranks);

}  // namespace ddp::launcher
