#include "launcher/output/live_area.hpp"

#include <algorithm>

namespace ddp::launcher {

void LiveArea::set(int source, std::string line) {
  auto& slot = lines_[source];
  if (slot == line) return;
  slot = std::move(line);
  dirty_ = true;
}

void LiveArea::clear(int source) {
  if (lines_.erase(source) != 0) dirty_ = true;
}

std::string LiveArea::erase() {
  if (drawn_rows_ == 0) return "";
  // To the row's start, CUU (N rows up), then ED (erase to the end of the screen).
  std::string out = "\r\x1b[" + std::to_string(drawn_rows_) + "A\x1b[J";
  drawn_rows_ = 0;
  return out;
}

std::string LiveArea::draw(int columns, int rows) {
  std::string out;
  const int width = std::max(1, columns - 1);
  // An area taller than the screen could not be moved back up to: the rest is counted.
  const int room = std::max(1, rows - 1);
  const int shown =
      static_cast<int>(lines_.size()) <= room ? static_cast<int>(lines_.size()) : room - 1;
  int row = 0;
  for (const auto& [source, line] : lines_) {
    if (row == shown) break;
    out += fit_to_columns(line, width);
    out += "\r\n";
    ++row;
  }
  if (shown < static_cast<int>(lines_.size())) {
    out += fit_to_columns(
        "... and " + std::to_string(lines_.size() - static_cast<size_t>(shown)) + " more", width);
    out += "\r\n";
    ++row;
  }
  drawn_rows_ = row;
  dirty_ = false;
  return out;
}

std::string fit_to_columns(std::string_view text, int columns) {
  std::string out;
  int used = 0;
  bool escapes = false;
  bool cut = false;
  for (size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte == 0x1b) {
      // CSI: ESC [ parameters, then one final byte in @..~; other escapes are two bytes.
      size_t end = i + 1;
      if (end < text.size() && text[end] == '[') {
        ++end;
        while (end < text.size() && (text[end] < '@' || text[end] > '~')) ++end;
      }
      end = std::min(text.size(), end + 1);
      out.append(text.substr(i, end - i));
      escapes = true;
      i = end;
      continue;
    }
    if (byte < 0x20 || byte == 0x7f) {
      ++i;  // a tab, a bell, a stray '\r': nothing that moves the cursor unpredictably
      continue;
    }
    size_t length = 1;  // one UTF-8 sequence: a lead byte and its continuation bytes
    while (i + length < text.size() &&
           (static_cast<unsigned char>(text[i + length]) & 0xc0) == 0x80) {
      ++length;
    }
    if (used == columns) {
      cut = true;
      break;
    }
    out.append(text.substr(i, length));
    ++used;
    i += length;
  }
  if (cut && escapes) out += "\x1b[0m";
  return out;
}

}  // namespace ddp::launcher
