#pragma once
// Identical lines from several local ranks, printed within a short window, become one line
// naming the ranks ("[default0-7]: epoch 3"). Each rank's lines wait in its own queue, in the
// order it wrote them, at most `window` each. A text that every rank still running has queued
// goes out at once as one line, once each rank can print it without passing a line of its own
// that another rank shares (a rank's own lines before it, "rank 3 loss 0.52", go out first).
// A line whose window ends goes out with every rank that holds the same text, each rank's
// lines before it going out first (a shared one with its own group, as early as that is).
// So no rank's lines change order, no line waits longer than the window, and different texts
// never merge.
// Pure: lines and times in, lines to print out; the console (console.hpp) does the I/O.
#include <array>
#include <chrono>
#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ddp::launcher {

// How long a whole line waits for the same text from other ranks (--log_collapse).
inline constexpr std::chrono::milliseconds kCollapseWindow{250};
// Text held at most (a burst from many ranks): past it the oldest lines go out before their
// window ends.
inline constexpr size_t kCollapseMaxHeldBytes = size_t{1} << 20;
// How deep a line's group may first let out the shared lines standing before it.
inline constexpr size_t kMaxNesting = 8;

// A line to print: its text and the local ranks that printed it, ascending.
struct CollapsedLine {
  int stream = 1;  // 1 stdout, 2 stderr
  std::vector<int> ranks;
  std::string text;
};

class LineCollapser {
 public:
  using Clock = std::chrono::steady_clock;

  // feeds[r][s - 1]: local rank r's stream s comes here (its console); a text is complete
  // once every rank still feeding its stream has it.
  LineCollapser(std::chrono::milliseconds window, std::vector<std::array<bool, 2>> feeds);

  // A whole line of local_rank's stream (no newline); returns the lines ready now, in order.
  std::vector<CollapsedLine> add(int local_rank, int stream, std::string_view text,
                                 Clock::time_point now);
  // local_rank ended: lines no longer wait for it. Returns the lines ready now.
  std::vector<CollapsedLine> rank_done(int local_rank, Clock::time_point now);
  // The lines whose window has passed by now, with what goes out with them, in order.
  std::vector<CollapsedLine> due(Clock::time_point now);
  // Everything held, in order (before output that must not pass them).
  std::vector<CollapsedLine> flush();
  // When the oldest held line is due; nullopt when nothing is held.
  [[nodiscard]] std::optional<Clock::time_point> next_due() const;
  [[nodiscard]] bool empty() const { return held_bytes_ == 0 && lines_ == 0; }

 private:
  struct Line {
    std::string key;  // the stream's digit, then the text
    Clock::time_point since;
  };
  // Where rank's queue holds key with nothing before it that another rank shares; nullopt
  // when it holds no such key.
  [[nodiscard]] std::optional<size_t> reach(size_t rank, const std::string& key) const;
  // The first line before key in rank's queue that another rank shares; nullopt when none.
  [[nodiscard]] std::optional<std::string> blocker(size_t rank, const std::string& key) const;
  // Prints key's line for every rank that holds it: first each one's own lines before it, and
  // the shared ones before it with their own groups (emitting: the keys being printed, so a
  // group never waits for itself).
  void emit(const std::string& key, std::vector<CollapsedLine>& out,
            std::vector<std::string>& emitting);
  // Emits key when every rank feeding its stream reaches it, after the lines older than it.
  bool emit_if_complete(const std::string& key, std::vector<CollapsedLine>& out);
  // The rank whose queue's first line is the oldest held; nullopt when nothing is held.
  [[nodiscard]] std::optional<size_t> oldest_front() const;
  // Emits complete texts at the front of the queues, then (until now, or everything when
  // now is unset) the oldest lines whose window has ended.
  std::vector<CollapsedLine> release(std::optional<Clock::time_point> now);
  void pop_front(size_t rank);

  std::chrono::milliseconds window_;
  std::vector<std::array<bool, 2>> feeds_;  // cleared for ranks that are done
  std::vector<std::deque<Line>> queues_;    // per local rank, oldest first
  // Per text (key), how many lines of each rank hold it.
  std::unordered_map<std::string, std::map<size_t, int>> where_;
  size_t held_bytes_ = 0;
  size_t lines_ = 0;
};

// "0-3,5,7-8": ascending ranks as ranges.
std::string format_rank_set(const std::vector<int>& ranks);

}  // namespace ddp::launcher
