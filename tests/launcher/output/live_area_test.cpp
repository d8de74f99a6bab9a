// The live area at the bottom of a terminal (live_area.hpp): the bytes it writes.
#include "launcher/output/live_area.hpp"

#include <catch2/catch.hpp>

using namespace ddp::launcher;

TEST_CASE("the live area draws its lines in source order and erases exactly them", "[live]") {
  LiveArea area;
  CHECK(area.erase().empty());  // nothing drawn yet
  area.set(2, "[default1]: 10%");
  area.set(0, "[default0]: 20%");
  CHECK(area.dirty());
  CHECK(area.draw(80, 24) == "[default0]: 20%\r\n[default1]: 10%\r\n");
  CHECK_FALSE(area.dirty());
  area.set(0, "[default0]: 20%");  // unchanged
  CHECK_FALSE(area.dirty());
  // Up two rows from below the area, then erase to the end of the screen.
  CHECK(area.erase() == "\r\x1b[2A\x1b[J");
  CHECK(area.erase().empty());
  area.clear(2);
  CHECK(area.draw(80, 24) == "[default0]: 20%\r\n");
  area.clear(0);
  CHECK(area.empty());
  CHECK(area.erase() == "\r\x1b[1A\x1b[J");
  CHECK(area.draw(80, 24).empty());
}

TEST_CASE("live lines never wrap, and more lines than rows are counted", "[live]") {
  LiveArea area;
  area.set(0, std::string(100, 'x'));
  CHECK(area.draw(40, 24) == std::string(39, 'x') + "\r\n");
  for (int source = 1; source < 10; ++source) area.set(source, "line");
  const auto text = area.draw(40, 5);  // 4 rows at most
  CHECK(text.find("... and 7 more") != std::string::npos);
  CHECK(area.erase() == "\r\x1b[4A\x1b[J");
}

TEST_CASE("fit_to_columns counts characters, not bytes, and skips escapes", "[live]") {
  // tqdm's bar characters are 3 bytes each in UTF-8.
  CHECK(fit_to_columns("\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88|", 2) == "\xe2\x96\x88\xe2\x96\x88");
  CHECK(fit_to_columns("\x1b[32mgreen\x1b[0m", 5) == "\x1b[32mgreen\x1b[0m");
  CHECK(fit_to_columns("\x1b[32mgreen and more", 5) == "\x1b[32mgreen\x1b[0m");
  CHECK(fit_to_columns("a\tb\x07"
                       "c",
                       10) == "abc");
}
