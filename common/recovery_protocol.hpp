#pragma once
// The in-place recovery channel between an agent and each of its workers (docs/recovery.md).
// With --in_place_recovery the agent gives every worker one end of a Unix stream socketpair
// as an inherited descriptor, named by $DDPLAUNCH_RECOVERY_FD; both sides write lines
//   <type> key=value key=value ...\n
// (tokens separated by one space; values hold no whitespace; unknown keys are ignored so a
// later version may add some; a line is at most kMaxLineBytes).
//
// worker -> agent
//   hello   pid=<int> local_rank=<int>                the runtime is listening (once, at init)
//   aborted round=<int>                               its collectives are aborted for the change
//   built   round=<int>                               its group of the new round is built
//   joined  round=<int> rank=<int> step=<int64> source=<int> state_bytes=<int64>
//           the new group is built and every rank holds the agreed state at step (the last
//           step every survivor completed); source is the rank whose state was sent (-1:
//           none was sent, every rank already had it)
//   stepped round=<int> step=<int64>                  the first step after the change is done
// agent -> worker
//   abort   round=<int> reason=<word>                 membership changes: stop collectives now
//                                                     (round: the round being left)
//   round   round=<int> rank=<int> world_size=<int> group_rank=<int> group_world_size=<int>
//           local_world_size=<int> role_rank=<int> role_world_size=<int>
//           master_addr=<host> master_port=<int> restart_count=<int> [local_rank=<int>]
//           the new round: rebuild the group with these (the env contract's values);
//           local_rank is LOCAL_RANK as a worker started now gets it (a standby worker,
//           kEnvStandby, learns it here; older agents leave it out)
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ddp::recovery {

// The inherited descriptor of the worker's end of the channel (absent: no in-place recovery).
inline constexpr const char* kEnvFd = "DDPLAUNCH_RECOVERY_FD";
// Seconds a worker whose collective failed waits for the agent to announce a membership
// change before it fails as it would without in-place recovery (default 60; operators with a
// lease_timeout near that raise it).
inline constexpr const char* kEnvChangeWait = "DDPLAUNCH_RECOVERY_CHANGE_WAIT";
// Set to 1 for the workers of a spare (a node standing by while the group is full, with
// --in_place_recovery): they start before their node is admitted, without the round's
// variables (RANK, WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT), build what they can, and wait on the
// channel for the `round` notice that admits their node (it carries those values).
inline constexpr const char* kEnvSpare = "DDPLAUNCH_SPARE";
// Set to 1 (with kEnvSpare=1) for a standby worker (--standby_workers): a parked process that
// takes the place of one of its node's workers that died. It is started before anyone knows
// which, so LOCAL_RANK is absent too; the round notice that promotes it carries local_rank.
inline constexpr const char* kEnvStandby = "DDPLAUNCH_STANDBY";
// The descriptor number the agent gives it (after stdin, stdout, stderr).
inline constexpr int kChildFd = 3;
inline constexpr size_t kMaxLineBytes = 4096;

// Message types.
inline constexpr std::string_view kHello = "hello";
inline constexpr std::string_view kAborted = "aborted";
inline constexpr std::string_view kBuilt = "built";
inline constexpr std::string_view kJoined = "joined";
inline constexpr std::string_view kStepped = "stepped";
inline constexpr std::string_view kAbort = "abort";
inline constexpr std::string_view kRound = "round";

// One line: its type and its key=value fields.
struct Message {
  std::string type;
  std::map<std::string, std::string> fields;

  // The field as text; ProtocolError naming the type and key when it is missing.
  [[nodiscard]] const std::string& text(const std::string& key) const;
  // The field as an integer in [min, max]; ProtocolError naming the key, the value and what
  // was expected.
  [[nodiscard]] int64_t integer(const std::string& key, int64_t min = 0,
                                int64_t max = INT64_MAX) const;
  Message& set(const std::string& key, std::string value);
  Message& set(const std::string& key, int64_t value);

  bool operator==(const Message&) const = default;
};

// The message as one line, '\n' included. ProtocolError when the type or a key is not a word
// ([A-Za-z0-9_]+) or a value is empty, holds whitespace or '=' is in a key, or the line would
// be longer than kMaxLineBytes.
std::string format(const Message& message);
// Parses one line (a trailing "\n" is allowed). nullopt on a bad line and, when error is not
// null, a sentence naming the bad token and what was expected.
std::optional<Message> parse(std::string_view line, std::string* error);

// Where one worker stands in a round, as the env contract tells it (RANK, WORLD_SIZE,
// GROUP_RANK, ..., MASTER_ADDR/PORT, TORCHELASTIC_RESTART_COUNT). Defined once: the launcher
// builds every worker's environment from it (launcher/process/worker_command.hpp's
// WorkerIdentity, which adds the local rank), and a kept worker's round notice carries it.
struct WorkerPlace {
  int rank = 0;
  int world_size = 1;
  int group_rank = 0;
  int group_world_size = 1;
  int local_world_size = 1;
  int role_rank = 0;  // one role per job: the global rank
  int role_world_size = 1;
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT: the rendezvous round

  bool operator==(const WorkerPlace&) const = default;
};

// The env contract's variables a WorkerPlace is, in one order: (name, value) pairs. What a
// spare's worker lacks until its notice comes, and what it then sets.
std::vector<std::pair<std::string, std::string>> place_variables(const WorkerPlace& place);

// The new round, as the agent sends it (type "round"): the worker's place in it.
struct RoundNotice : WorkerPlace {
  int64_t round = 0;
  int local_rank = -1;  // LOCAL_RANK as the env contract gives it (-1: not sent)

  [[nodiscard]] Message to_message() const;
  // ProtocolError naming the field when one is missing or out of range.
  static RoundNotice from_message(const Message& message);
  bool operator==(const RoundNotice&) const = default;
};

}  // namespace ddp::recovery
