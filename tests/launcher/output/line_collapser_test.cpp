// Identical lines of several ranks collapsed into one (line_collapser.hpp): pure, times given.
#include "launcher/output/line_collapser.hpp"

#include <catch2/catch.hpp>

using namespace ddp::launcher;
using namespace std::chrono_literals;

namespace {

using Clock = LineCollapser::Clock;
const Clock::time_point t0{};

// Every rank feeds stdout and stderr.
std::vector<std::array<bool, 2>> all_feed(int ranks) {
  return std::vector<std::array<bool, 2>>(static_cast<size_t>(ranks), {true, true});
}

std::string show(const std::vector<CollapsedLine>& lines) {
  std::string out;
  for (const auto& line : lines) {
    out += std::to_string(line.stream) + "[" + format_rank_set(line.ranks) + "]" + line.text + "\n";
  }
  return out;
}

}  // namespace

TEST_CASE("format_rank_set writes ranges", "[collapse]") {
  CHECK(format_rank_set({0, 1, 2, 3, 4, 5, 6, 7}) == "0-7");
  CHECK(format_rank_set({0, 2, 3, 5, 7, 8}) == "0,2-3,5,7-8");
  CHECK(format_rank_set({4}) == "4");
  CHECK(format_rank_set({}).empty());
}

TEST_CASE("a line every rank printed goes out at once, once, with all the ranks", "[collapse]") {
  LineCollapser c(250ms, all_feed(4));
  CHECK(c.add(0, 1, "epoch 3", t0).empty());
  CHECK(c.add(2, 1, "epoch 3", t0 + 1ms).empty());
  CHECK(c.add(1, 1, "epoch 3", t0 + 2ms).empty());
  // The fourth completes it: no need to wait for the window.
  CHECK(show(c.add(3, 1, "epoch 3", t0 + 3ms)) == "1[0-3]epoch 3\n");
  CHECK(c.empty());
}

TEST_CASE("different texts are kept apart and in order, none held past the window", "[collapse]") {
  LineCollapser c(250ms, all_feed(3));
  CHECK(c.add(0, 1, "rank 0 only", t0).empty());
  CHECK(c.add(1, 1, "same", t0 + 10ms).empty());
  CHECK(c.add(2, 1, "same", t0 + 20ms).empty());
  CHECK(c.add(1, 2, "same", t0 + 30ms).empty());  // the same text on stderr is another line
  CHECK(c.next_due() == t0 + 250ms);
  CHECK(c.due(t0 + 249ms).empty());
  // The first line's window ends: it goes, and so does the stdout "same" behind it? Not yet:
  // its own window ends 10 ms later.
  CHECK(show(c.due(t0 + 250ms)) == "1[0]rank 0 only\n");
  CHECK(show(c.due(t0 + 260ms)) == "1[1-2]same\n");
  CHECK(show(c.due(t0 + 280ms)) == "2[1]same\n");
  CHECK(c.empty());
}

TEST_CASE("a rank's own lines never change order to join a group", "[collapse]") {
  LineCollapser c(250ms, all_feed(2));
  CHECK(c.add(0, 1, "a", t0).empty());
  CHECK(c.add(0, 1, "b", t0).empty());
  // Rank 1 prints b: rank 0's a (its own) goes first, then b for both.
  CHECK(show(c.add(1, 1, "b", t0)) == "1[0]a\n1[0-1]b\n");
  // Rank 1's a comes after its b: rank 0's a is gone, so it is rank 1's alone.
  CHECK(c.add(1, 1, "a", t0).empty());
  CHECK(show(c.flush()) == "1[1]a\n");
}

TEST_CASE("a line printed twice by one rank is two lines", "[collapse]") {
  LineCollapser c(250ms, all_feed(2));
  CHECK(c.add(0, 1, "x", t0).empty());
  CHECK(c.add(0, 1, "x", t0).empty());
  CHECK(show(c.add(1, 1, "x", t0)) == "1[0-1]x\n");  // the first of each
  CHECK(show(c.add(1, 1, "x", t0)) == "1[0-1]x\n");  // and the second
  CHECK(c.flush().empty());
}

TEST_CASE(
    "a line some ranks share, before a line all share: both collapse, whichever rank's "
    "window ends first",
    "[collapse]") {
  // Each rank: its own line, then (even ranks) a line of the even ranks, then a line of all.
  for (int first : {0, 1}) {
    LineCollapser c(250ms, all_feed(4));
    std::string out;
    for (int rank : {first, 1 - first, 2, 3}) {
      const auto at = t0 + std::chrono::milliseconds(rank == first ? 0 : 5);
      out += show(c.add(rank, 1, "own " + std::to_string(rank), at));
      if (rank % 2 == 0) out += show(c.add(rank, 1, "even", at));
      out += show(c.add(rank, 1, "all", at));
    }
    // Nothing was complete: "all" waits behind "even" on the even ranks.
    CHECK(out.empty());
    out = show(c.due(t0 + 250ms));  // the first rank's lines are due
    INFO("first " << first << ":\n" << out);
    CHECK(out.find("1[0,2]even\n") != std::string::npos);
    CHECK(out.find("1[0-3]all\n") != std::string::npos);
    CHECK(out.find("even") < out.find("all"));
    for (int rank = 0; rank < 4; ++rank) {
      CHECK(out.find("1[" + std::to_string(rank) + "]own " + std::to_string(rank) + "\n") <
            out.find("all"));
    }
    CHECK(c.empty());
  }
}

TEST_CASE("ranks that ended are not waited for, nor ranks not feeding a stream", "[collapse]") {
  // Rank 2's stderr does not come here (-r, or another console).
  std::vector<std::array<bool, 2>> feeds = {{true, true}, {true, true}, {true, false}};
  LineCollapser c(250ms, feeds);
  CHECK(c.add(0, 2, "warning", t0).empty());
  CHECK(show(c.add(1, 2, "warning", t0)) == "2[0-1]warning\n");
  CHECK(c.add(0, 1, "done", t0).empty());
  CHECK(c.add(1, 1, "done", t0).empty());
  CHECK(show(c.rank_done(2, t0)) == "1[0-1]done\n");
}

TEST_CASE("a burst past the held bytes goes out before its window ends", "[collapse]") {
  LineCollapser c(250ms, all_feed(2));
  const std::string line(1000, 'x');
  size_t out = 0;
  for (int i = 0; i < 2000; ++i) {
    out += c.add(0, 1, line + std::to_string(i), t0).size();
  }
  CHECK(out > 0);
  CHECK(out + c.flush().size() == 2000);
}
