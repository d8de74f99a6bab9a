// store_loss_step() (store_loss.hpp): what a lost store connection means for this node, as a
// table; and what each step says.
#include "launcher/agent/store_loss.hpp"

#include <catch2/catch.hpp>

#include "launcher/agent/agent_state.hpp"
#include "tests/launcher/agent/captures.hpp"

using namespace ddp::launcher;
using ddp::PeerLoss;
using ddp::launcher::testing::LoggedLines;
using ddp::launcher::testing::RecordedEvents;
using Step = StoreLossStep;

namespace {

struct Row {
  PeerLoss loss;
  bool moves;
  bool elastic;
  AgentState state;
  EndCause ending;
  bool awaiting;
  Step step;
};

StoreLossFacts facts_of(const Row& r) {
  StoreLossFacts f{r.loss, r.moves, r.elastic};
  f.leaving = r.state == AgentState::kExiting || r.state == AgentState::kDone;
  f.healthy = r.state == AgentState::kHealthy;
  f.stopping = r.state == AgentState::kStopping;
  f.ending = r.ending;
  f.awaiting_record = r.awaiting;
  return f;
}

}  // namespace

TEST_CASE("store_loss_step: every way a store is lost, from where the node stands") {
  using S = AgentState;
  const auto death = PeerLoss::kDeath;
  const auto silence = PeerLoss::kSilence;
  const std::vector<Row> rows = {
      // leaving, or already joining again after the store's silence: nothing to do
      {death, true, true, S::kExiting, EndCause::kNone, false, Step::kIgnore},
      {death, false, false, S::kDone, EndCause::kNone, false, Step::kIgnore},
      {silence, true, true, S::kStopping, EndCause::kStoreSilent, false, Step::kIgnore},
      // the store's host died and the store moves: a node lost
      {death, true, true, S::kHealthy, EndCause::kNone, false, Step::kHostGone},
      {death, true, true, S::kStopping, EndCause::kClaim, false, Step::kHostGone},
      // silence in an elastic job: this node may be the one cut off
      {silence, false, true, S::kHealthy, EndCause::kNone, false, Step::kCutOff},
      {silence, true, true, S::kStopping, EndCause::kNodeLost, false, Step::kCutOff},
      // the record awaited will not come
      {death, true, true, S::kStopping, EndCause::kWorkerFailed, true, Step::kSettle},
      {silence, false, false, S::kStopping, EndCause::kWorkerFailed, true, Step::kSettle},
      // lost for good: static, or a death where the store cannot move
      {silence, false, false, S::kHealthy, EndCause::kNone, false, Step::kLost},
      {death, false, true, S::kHealthy, EndCause::kNone, false, Step::kLost},
      {death, false, false, S::kStopping, EndCause::kClaim, false, Step::kLost},
      // between rounds, or stopping for a failure with no record awaited: nothing
      {death, false, false, S::kRendezvous, EndCause::kNone, false, Step::kIgnore},
      {death, false, false, S::kStopping, EndCause::kWorkerFailed, false, Step::kIgnore},
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    INFO("row " << i);
    CHECK(store_loss_step(facts_of(rows[i])) == rows[i].step);
  }
}

TEST_CASE("what each step of a lost store says") {
  RecordedEvents events;
  LoggedLines lines;
  report_store_host_gone(events.log, "the store", "reset");
  CHECK(lines.logged("the node that hosted it is gone"));
  CHECK(events.named("store_lost").at(0)["moves"] == true);
  report_cut_off(events.log, "the store", "timed out", true, "11 12");
  CHECK(lines.logged("keeping this node's workers (pids 11 12) and re-forming in place"));
  report_cut_off(events.log, "the store", "timed out", false, "11 12");
  CHECK(lines.logged("joining the job again as a new node"));
  CHECK(events.named("store_silent").size() == 2);
  report_store_lost(events.log, "the store", "refused", "advice", std::nullopt);
  CHECK(lines.logged("lost the store (refused): advice"));
  CHECK_FALSE(lines.logged("advice; stopping"));
  report_store_lost(events.log, "the store", "refused", "advice", std::string("7"));
  CHECK(lines.logged("advice; stopping this node's workers (pids 7)"));
  CHECK(watcher_loss_text("") == "the rendezvous watcher lost its connection");
  CHECK(watcher_loss_text("eof") == "the rendezvous watcher lost its connection: eof");
}
