// Progress bars in a pipe or file thinned to a few lines (bar_thinner.hpp): pure, times given.
#include "launcher/output/bar_thinner.hpp"

#include <catch2/catch.hpp>

using namespace ddp::launcher;
using namespace std::chrono_literals;

namespace {
const BarThinner::Clock::time_point t0{};
}

TEST_CASE("a bar prints its first state, then at most one per interval, and its last", "[bars]") {
  BarThinner thin(5s);
  CHECK(thin.update(1, "  0%|", t0) == "  0%|");
  CHECK_FALSE(thin.update(1, " 10%|#", t0 + 100ms));
  CHECK_FALSE(thin.update(1, " 20%|##", t0 + 200ms));
  CHECK(thin.next_due() == t0 + 5s);
  CHECK(thin.due(t0 + 4999ms).empty());
  // Nothing new came for the rest of the interval: the newest held state is printed then.
  auto due = thin.due(t0 + 5s);
  REQUIRE(due.size() == 1);
  CHECK(due[0] == std::make_pair(1, std::string(" 20%|##")));
  CHECK_FALSE(thin.next_due());
  CHECK_FALSE(thin.update(1, " 50%|#####", t0 + 6s));
  CHECK(thin.update(1, " 60%|######", t0 + 10s) == " 60%|######");
  CHECK_FALSE(thin.update(1, " 90%|#########", t0 + 11s));
  // The end: the final state is printed whatever the interval says.
  CHECK(thin.finish(1, "100%|##########") == "100%|##########");
  CHECK_FALSE(thin.next_due());
}

TEST_CASE("a blank final state (a bar cleared) prints the newest held one, and bars are apart",
          "[bars]") {
  BarThinner thin(5s);
  CHECK(thin.update(1, "a 1", t0));
  CHECK(thin.update(3, "b 1", t0));  // another source: its own interval
  CHECK_FALSE(thin.update(1, "a 2", t0 + 1s));
  CHECK_FALSE(thin.update(1, "   ", t0 + 2s));  // blank: never printed, the held one stays
  CHECK(thin.finish(1, "    ") == "a 2");
  CHECK_FALSE(thin.finish(3, "b 1"));  // printed already
  CHECK_FALSE(thin.finish(7, ""));     // never seen
  CHECK(is_blank(" \t "));
  CHECK_FALSE(is_blank(" x "));
}
