// Hang analysis as the agent runs it: which local ranks are hung (HangDetector, time
// driven by the test), who is the culprit and how the report reads (analyze_hang), and
// the snapshots other nodes read through the store (encode/decode).
#include "launcher/hang/hang_analysis.hpp"

#include <catch2/catch.hpp>

#include "launcher/hang/hang_detector.hpp"
#include "launcher/hang/progress_board.hpp"

using namespace std::chrono_literals;
using ddp::launcher::analyze_hang;
using ddp::launcher::HangDetector;
using ddp::launcher::RankSnapshot;
using ddp::progress::Phase;
using ddp::progress::Report;

namespace {

RankSnapshot at(int rank, int64_t step, const char* op, int64_t seq, Phase phase, double silent,
                bool hung = true) {
  RankSnapshot r;
  r.rank = rank;
  r.has_source = true;
  r.last.rank = rank;
  r.last.step = step;
  r.last.op = op;
  r.last.seq = seq;
  r.last.phase = phase;
  r.silent_s = silent;
  r.hung = hung;
  return r;
}

Report report(int rank, int pid, int64_t step, int64_t seq = -1, Phase phase = Phase::kNone) {
  Report r;
  r.rank = rank;
  r.pid = pid;
  r.step = step;
  if (seq >= 0) r.op = "all_reduce";
  r.seq = seq;
  r.phase = phase;
  return r;
}

}  // namespace

TEST_CASE("hang report: the rank behind by one collective is the culprit, the rest wait",
          "[hang]") {
  std::vector<RankSnapshot> ranks = {at(0, 1200, "all_reduce", 5312, Phase::kEnter, 58),
                                     at(1, 1200, "all_reduce", 5312, Phase::kEnter, 58),
                                     at(2, 1200, "all_reduce", 5312, Phase::kEnter, 59),
                                     at(3, 1200, "all_reduce", 5311, Phase::kExit, 60)};
  auto report = analyze_hang(ranks);
  CHECK(report.culprits == std::vector<int>{3});
  CHECK(report.victims == std::vector<int>{0, 1, 2});
  CHECK(report.text ==
        "rank 3: no progress for 60 s in step 1200, after collective all_reduce #5311; ranks 0-2 "
        "wait in all_reduce #5312");
}

TEST_CASE("hang report: every agent names the same culprit whatever order it reads ranks in",
          "[hang]") {
  std::vector<RankSnapshot> a = {at(2, 7, "all_reduce", 9, Phase::kEnter, 5),
                                 at(0, 7, "all_reduce", 9, Phase::kEnter, 5),
                                 at(1, 7, "all_reduce", 8, Phase::kExit, 6)};
  std::vector<RankSnapshot> b = {a[2], a[0], a[1]};
  CHECK(analyze_hang(a).culprits == std::vector<int>{1});
  CHECK(analyze_hang(a).culprits == analyze_hang(b).culprits);
}

TEST_CASE("hang report: a stopped rank is the culprit even without a progress source", "[hang]") {
  RankSnapshot stopped;
  stopped.rank = 1;
  stopped.state = 'T';
  stopped.silent_s = 12;
  stopped.hung = true;
  auto report = analyze_hang({at(0, 4, "all_reduce", 3, Phase::kEnter, 12), stopped});
  CHECK(report.culprits == std::vector<int>{1});
  CHECK(report.text ==
        "rank 1: stopped (state T), no progress for 12 s (no progress source); rank 0 waits in "
        "all_reduce #3");
}

TEST_CASE("hang report: a rank in state T is the culprit before its own clock says hung",
          "[hang]") {
  // Seen in the chaos harness: rank 2's node re-formed after the SIGSTOP, so its clock was
  // younger; the node of ranks 0 and 1 found nobody behind and blamed its own healthy rank.
  RankSnapshot stopped = at(2, 4114, "", -1, Phase::kNone, 12, /*hung=*/false);
  stopped.state = 'T';
  auto report = analyze_hang(
      {at(0, 4114, "", -1, Phase::kNone, 30), at(1, 4114, "", -1, Phase::kNone, 30), stopped});
  CHECK(report.culprits == std::vector<int>{2});
  CHECK(report.victims == std::vector<int>{0, 1});
  CHECK_THAT(report.text, Catch::StartsWith("rank 2: stopped (state T), no progress for 12 s"));
  // A traced rank ('t': py-spy, a debugger) is not blamed until its own clock says hung.
  stopped.state = 't';
  report = analyze_hang(
      {at(0, 4114, "", -1, Phase::kNone, 30), at(1, 4114, "", -1, Phase::kNone, 30), stopped});
  CHECK(report.culprits.empty());
}

TEST_CASE("hang report: steps decide when no rank reports collectives (the Python helper)",
          "[hang]") {
  RankSnapshot a = at(0, 40, "", -1, Phase::kNone, 3);
  RankSnapshot b = at(1, 39, "", -1, Phase::kNone, 4);
  auto report = analyze_hang({a, b});
  CHECK(report.culprits == std::vector<int>{1});
  CHECK(report.text == "rank 1: no progress for 4.0 s in step 39; rank 0 waits at step 40");
}

TEST_CASE("hang report: nobody behind names no culprit and says where they all are", "[hang]") {
  auto report = analyze_hang(
      {at(0, 5, "all_reduce", 9, Phase::kEnter, 30), at(1, 5, "all_reduce", 9, Phase::kEnter, 31)});
  CHECK(report.culprits.empty());
  CHECK(report.victims == std::vector<int>{0, 1});
  CHECK_THAT(report.text, Catch::StartsWith("no progress for 31 s: ranks 0-1 at all_reduce #9"));
}

TEST_CASE("hang report: rank lists are compact", "[hang]") {
  CHECK(ddp::launcher::rank_ranges({5, 0, 2, 1, 7, 6}) == "0-2,5-7");
  CHECK(ddp::launcher::rank_ranges({4}) == "4");
}

TEST_CASE("hang detector: silent progress past the timeout is a hang, moving progress is not",
          "[hang]") {
  HangDetector d(10s);
  const auto t0 = HangDetector::Clock::now();
  d.reset({{0, 100}, {1, 101}}, t0);
  d.on_progress(report(0, 100, 1), t0);
  d.on_progress(report(1, 101, 1), t0);
  // Rank 0 keeps moving slowly (one step per 9 s); rank 1 repeats the same place.
  for (int i = 1; i <= 5; ++i) {
    d.on_progress(report(0, 100, 1 + i), t0 + 9s * i);
    d.on_progress(report(1, 101, 1), t0 + 9s * i);
  }
  auto snap = d.snapshot(t0 + 45s);
  CHECK_FALSE(snap[0].hung);
  CHECK(snap[1].hung);
  CHECK(snap[1].silent_s == Approx(45));
}

TEST_CASE("hang detector: a worker with no progress source is hung only when stopped that long",
          "[hang]") {
  HangDetector d(5s);
  const auto t0 = HangDetector::Clock::now();
  d.reset({{0, 100}, {1, 101}}, t0);
  d.on_state(100, 'S', t0 + 1h);  // sleeps for an hour: not a hang without a source
  CHECK_FALSE(d.any_hung(t0 + 1h));
  d.on_state(101, 'T', t0 + 1h);
  CHECK_FALSE(d.any_hung(t0 + 1h + 4s));
  d.on_state(101, 'T', t0 + 1h + 4s);
  CHECK(d.any_hung(t0 + 1h + 5s));
  d.on_state(101, 'S', t0 + 1h + 6s);  // resumed (SIGCONT): no longer hung
  CHECK_FALSE(d.any_hung(t0 + 1h + 6s));
}

TEST_CASE("hang detector: progress from an unknown pid is matched by rank, else ignored",
          "[hang]") {
  HangDetector d(1s);
  const auto t0 = HangDetector::Clock::now();
  d.reset({{4, 100}}, t0);
  CHECK(d.on_progress(report(4, 0, 3), t0));  // a helper thread or wrapper: rank matches
  CHECK_FALSE(d.on_progress(report(9, 555, 3), t0));
  d.forget(100);
  CHECK(d.snapshot(t0).empty());
}

TEST_CASE("progress board: snapshots read back with their silence measured from the writer's clock",
          "[hang]") {
  auto r = at(3, 12, "broadcast", 44, Phase::kEnter, 2.5);
  r.state = 'S';
  const auto text = ddp::launcher::encode_snapshots({r}, 100000);
  auto back = ddp::launcher::decode_snapshots(text, 101000);  // read one second later
  REQUIRE(back.size() == 1);
  CHECK(back[0].rank == 3);
  CHECK(back[0].last.op == "broadcast");
  CHECK(back[0].last.seq == 44);
  CHECK(back[0].last.phase == Phase::kEnter);
  CHECK(back[0].state == 'S');
  CHECK(back[0].silent_s == Approx(3.5));
  // How long ago its node wrote it: what tells a paused or cut-off node.
  CHECK(back[0].unheard_s == Approx(1.0));
  CHECK(ddp::launcher::decode_snapshots(text, 99000)[0].unheard_s == 0);  // a clock behind
  // A view without its time (a bare array) reads with nothing known of its age.
  const auto bare = ddp::launcher::decode_snapshots(
      R"([{"rank": 1, "source": true, "moved_ms": 100000, "state": "", "hung": false, )"
      R"("step": 3, "op": "", "seq": -1, "phase": "none"}])",
      105000);
  REQUIRE(bare.size() == 1);
  CHECK(bare[0].silent_s == Approx(5.0));
  CHECK(bare[0].unheard_s == 0);
  CHECK(ddp::launcher::decode_snapshots("not json", 0).empty());
  CHECK(ddp::launcher::decode_snapshots(R"([{"rank": "x"}])", 0).empty());
}

TEST_CASE("hang report: a rank behind that still progresses is slow, not a culprit", "[hang]") {
  // Rank 0 evaluates (its steps move); ranks 1-2 have waited in a barrier past the timeout.
  auto report = analyze_hang({at(0, 90, "all_reduce", 40, Phase::kExit, 0.5, /*hung=*/false),
                              at(1, 90, "barrier", 41, Phase::kEnter, 70),
                              at(2, 90, "barrier", 41, Phase::kEnter, 70)});
  CHECK(report.culprits.empty());
  CHECK(report.slow == std::vector<int>{0});
  CHECK(report.text ==
        "rank 0 is behind at all_reduce #40 but still progressing; ranks 1-2 wait in barrier #41");
}

TEST_CASE("hang report: one sample of state D only breaks a tie", "[hang]") {
  auto d = at(0, 7, "all_reduce", 9, Phase::kEnter, 30);
  d.state = 'D';
  // Rank 1 is behind by a collective: it is the culprit, not the rank seen in D.
  CHECK(analyze_hang({d, at(1, 7, "all_reduce", 8, Phase::kExit, 31)}).culprits ==
        std::vector<int>{1});
  // Nobody behind: the rank in D is named.
  CHECK(analyze_hang({d, at(1, 7, "all_reduce", 9, Phase::kEnter, 31)}).culprits ==
        std::vector<int>{0});
}

TEST_CASE("hang report: the ranks of a node not heard from are the culprits, not their peers",
          "[hang]") {
  // A paused node (agent and workers stopped): its agent wrote its view before the pause, so
  // its ranks look neither stopped nor behind, and every rank sits in the same all-reduce.
  // Without the node's silence the report names nobody, and each node blames its own ranks.
  RankSnapshot paused2 = at(2, 80, "all_reduce", 161, Phase::kEnter, 12);
  RankSnapshot paused3 = at(3, 80, "all_reduce", 161, Phase::kEnter, 12);
  paused2.unheard_s = paused3.unheard_s = 12.4;
  paused2.unheard = paused3.unheard = true;
  auto report = analyze_hang({at(0, 80, "all_reduce", 161, Phase::kEnter, 11),
                              at(1, 80, "all_reduce", 161, Phase::kEnter, 11), paused2, paused3});
  CHECK(report.culprits == std::vector<int>{2, 3});
  CHECK(report.unheard == std::vector<int>{2, 3});
  CHECK(report.victims == std::vector<int>{0, 1});
  CHECK_THAT(report.text,
             Catch::StartsWith("rank 2: its node not heard from for 12 s (paused, or cut off from "
                               "the job's store), no progress for 12 s in step 80, in collective "
                               "all_reduce #161"));
  // Unheard but not hung (it moved a moment before its node went quiet): not a culprit.
  paused2.hung = paused3.hung = false;
  report = analyze_hang({at(0, 80, "all_reduce", 161, Phase::kEnter, 11),
                         at(1, 80, "all_reduce", 161, Phase::kEnter, 11), paused2, paused3});
  CHECK(report.culprits.empty());
  CHECK(report.unheard.empty());
}
