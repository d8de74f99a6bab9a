#pragma once
// The one-line progress protocol any worker may speak to its agent (docs/hangs.md, "The
// progress protocol"). A worker writes, to the FIFO named by $DDPLAUNCH_PROGRESS_FILE:
//   v1 rank=<int> pid=<int> step=<int64> [op=<name> seq=<int64> phase=enter|exit]\n
// space-separated key=value tokens after the version; unknown keys are ignored (so later
// versions may add some); one line is at most kMaxLineBytes (PIPE_BUF), so each write(2) of
// a whole line is atomic and lines of different workers never interleave.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/env_names.hpp"

namespace ddp::progress {

enum class Phase { kNone, kEnter, kExit };

// One progress line. Optional fields are "absent" at their defaults (op "", seq -1, kNone).
struct Report {
  int rank = -1;      // global rank (RANK), >= 0
  int pid = 0;        // the writer's pid, > 0
  int64_t step = -1;  // training step (or any counter that grows while work gets done), >= 0
  std::string op;     // the operation being entered/left, e.g. "allreduce" (no whitespace)
  int64_t seq = -1;   // its sequence number (collectives: the same on every rank), >= 0
  Phase phase = Phase::kNone;

  bool operator==(const Report&) const = default;
};

inline constexpr const char* kEnvProgressFile = env::kProgressFile;
// The longest line the protocol allows, newline included (Linux's PIPE_BUF).
inline constexpr size_t kMaxLineBytes = 4096;
// format() cuts op to this many bytes, so every formatted line fits in kMaxLineBytes.
inline constexpr size_t kMaxOpBytes = 256;

// The report as one protocol line, '\n' included. Whitespace and control bytes in op become
// '_', and op is cut to kMaxOpBytes; absent optional fields are left out.
std::string format(const Report& report);
// Parses one line (a trailing "\n" or "\r\n" is allowed). On a bad line returns nullopt and,
// when error is not null, sets it to a sentence naming the bad token and what was expected.
std::optional<Report> parse(std::string_view line, std::string* error);
// "enter", "exit" or "" (kNone).
const char* phase_name(Phase phase);

}  // namespace ddp::progress
