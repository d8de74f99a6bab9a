#pragma once
// A progress bar ('\r' redraws: tqdm, Lightning) going to a pipe or a file, where a redraw in
// place is impossible, becomes a few lines instead of one per update: a bar's newest state is
// printed at most once per interval (its first state at once), a state held back is printed
// when its interval ends even if no update follows (a bar that stalls shows where), and the
// bar's last state is always printed. Blank states (a bar cleared before a tqdm.write) are
// never printed. Pure: states and times in, lines to print out.
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ddp::launcher {

// At most one state of a bar per this long in a pipe or file (--progress_bars).
inline constexpr std::chrono::milliseconds kBarInterval{5000};

class BarThinner {
 public:
  using Clock = std::chrono::steady_clock;

  explicit BarThinner(std::chrono::milliseconds interval = kBarInterval);

  // A new state of source's bar: the text to print now, or nullopt (held back, or blank).
  std::optional<std::string> update(int source, std::string_view state, Clock::time_point now);
  // source's bar ended (a newline after it, or its worker's exit) with final_state: what is
  // left to print (the final state, or the newest one held back when the final one is blank or
  // was printed already); nullopt when nothing is. Forgets the bar.
  std::optional<std::string> finish(int source, std::string_view final_state);
  // The held-back states whose interval has ended by now: (source, text), printed as they go.
  std::vector<std::pair<int, std::string>> due(Clock::time_point now);
  // When the next held-back state is due; nullopt when none is held.
  [[nodiscard]] std::optional<Clock::time_point> next_due() const;

 private:
  struct Bar {
    std::optional<Clock::time_point> printed_at;  // when a state was last printed
    std::string printed;                          // ...and which
    std::optional<std::string> held;              // the newest state not printed yet
  };

  std::chrono::milliseconds interval_;
  std::map<int, Bar> bars_;
};

// True when text holds nothing but spaces and tabs.
bool is_blank(std::string_view text);

}  // namespace ddp::launcher
