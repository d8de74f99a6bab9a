#pragma once
// The lines at the bottom of a terminal that are redrawn in place, one per worker stream with a
// progress bar or an unfinished line, below the output that scrolls (as build tools show their
// running jobs). Output is written above it: erase() the area, write the lines, draw() it again.
// Each live line is cut to the terminal's width so that none wraps: the cursor then moves
// back up exactly as many rows as were drawn. Pure: it returns the bytes to write (ANSI/VT100
// sequences every terminal emulator in use understands); the console writes them.
#include <map>
#include <string>
#include <string_view>

namespace ddp::launcher {

class LiveArea {
 public:
  // source's live line (already prefixed); replaces its previous one. Lines are shown in the
  // order of their sources.
  void set(int source, std::string line);
  // source has no live line any more.
  void clear(int source);
  [[nodiscard]] bool empty() const { return lines_.empty(); }
  // Changed since the last draw().
  [[nodiscard]] bool dirty() const { return dirty_; }
  // Bytes moving the cursor from below the drawn area to its first row and erasing to the end
  // of the screen; "" when nothing is drawn.
  std::string erase();
  // Bytes drawing every live line, each cut to columns - 1 (at least 1), each ending in "\r\n":
  // the cursor ends below the area, at the start of a row. At most rows - 1 rows: past that,
  // the last one counts the lines not shown.
  std::string draw(int columns, int rows);

 private:
  std::map<int, std::string> lines_;
  int drawn_rows_ = 0;
  bool dirty_ = false;
};

// text cut to at most columns display columns: UTF-8 sequences count one column, escape
// sequences ("\x1b[1;32m") none, control characters are dropped; a cut line that held escape
// sequences ends with a reset ("\x1b[0m") so no color leaks below it.
std::string fit_to_columns(std::string_view text, int columns);

}  // namespace ddp::launcher
