// RoundHistory (round_history.hpp): a claim that brings back the same nodes counts as a
// restart; a loss, or other nodes, never does.
#include "launcher/agent/round_history.hpp"

#include <catch2/catch.hpp>

#include "tests/launcher/agent/captures.hpp"

using namespace ddp::launcher;
using ddp::launcher::testing::LoggedLines;
using ddp::launcher::testing::RecordedEvents;

namespace {

ddp::rendezvous::RendezvousInfo round_with(uint64_t round, const std::string& members) {
  ddp::rendezvous::RendezvousInfo info;
  info.round = round;
  info.members = members;
  return info;
}

}  // namespace

TEST_CASE("the same nodes again, only after a claim and in the very next round") {
  RoundHistory history;
  CHECK_FALSE(history.same_nodes_again(round_with(0, "a,b")));
  history.reform = Reform::kClaim;
  CHECK(history.same_nodes_again(round_with(1, "a,b")));
  CHECK(history.reform == Reform::kNone);
  history.reform = Reform::kLoss;
  CHECK_FALSE(history.same_nodes_again(round_with(2, "a,b")));
  history.reform = Reform::kClaim;
  CHECK_FALSE(history.same_nodes_again(round_with(3, "a,b,c")));  // another node came
  history.reform = Reform::kClaim;
  CHECK_FALSE(history.same_nodes_again(round_with(5, "a,b,c")));  // not the next round
  history.reform = Reform::kClaim;
  CHECK_FALSE(history.same_nodes_again(round_with(6, "")));  // no members said
}

TEST_CASE("the same nodes again spend a restart while one is left") {
  RecordedEvents events;
  LoggedLines lines;
  RoundHistory history;
  CHECK(history.count_same_nodes(1, events.log));
  CHECK(history.restarts_spent == 1);
  CHECK(events.named("restart").at(0)["reason"] == "same_members");
  CHECK(lines.logged("counting it as restart 1 of 1"));
  CHECK_FALSE(history.count_same_nodes(1, events.log));
  CHECK(history.restarts_spent == 1);
  CHECK(events.named("rendezvous_failed").size() == 1);
  CHECK(lines.logged("no restart is left (max_restarts 1); giving up"));
}

TEST_CASE("why a node re-joins after each cause, and where the attempt's files go") {
  CHECK(reform_after(EndCause::kClaim) == Reform::kClaim);
  CHECK(reform_after(EndCause::kNodeLost) == Reform::kLoss);
  CHECK(reform_after(EndCause::kStoreSilent) == Reform::kLoss);
  CHECK(reform_after(EndCause::kJobFailed) == Reform::kNone);
  RoundHistory history;
  history.attempt = 4;
  CHECK(history.attempt_dir("/run") == std::filesystem::path("/run/attempt_4"));
}
