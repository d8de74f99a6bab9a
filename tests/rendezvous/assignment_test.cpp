// Group ranks and RANK offsets the closing node hands out.
#include "rendezvous/assignment.hpp"

#include <catch2/catch.hpp>

#include "common/error.hpp"

using namespace ddp::rendezvous;

namespace {
std::optional<NodeRecord> node(int nproc, int prev, const std::string& id) {
  return NodeRecord{nproc, prev, id};
}
}  // namespace

TEST_CASE("assign_ranks: fresh nodes get ranks in arrival order, offsets are prefix sums",
          "[rdzv]") {
  const auto out = assign_ranks({node(2, -1, "a"), node(4, -1, "b"), node(1, -1, "c")});
  REQUIRE(out.size() == 3);
  CHECK(out[0]->group_rank == 0);
  CHECK(out[1]->group_rank == 1);
  CHECK(out[2]->group_rank == 2);
  CHECK(out[0]->rank_offset == 0);
  CHECK(out[1]->rank_offset == 2);
  CHECK(out[2]->rank_offset == 6);
  for (const auto& a : out) {
    CHECK(a->world_size == 7);
    CHECK(a->group_world_size == 3);
  }
}

TEST_CASE("assign_ranks: nodes keep their previous rank whatever order they arrive in", "[rdzv]") {
  // Arrival order c, a, b; previous ranks 2, 0, 1.
  const auto out = assign_ranks({node(1, 2, "c"), node(3, 0, "a"), node(2, 1, "b")});
  CHECK(out[0]->group_rank == 2);
  CHECK(out[1]->group_rank == 0);
  CHECK(out[2]->group_rank == 1);
  // Offsets follow group-rank order: a(3) b(2) c(1).
  CHECK(out[1]->rank_offset == 0);
  CHECK(out[2]->rank_offset == 3);
  CHECK(out[0]->rank_offset == 5);
}

TEST_CASE("assign_ranks: after a loss, out-of-range ranks fill the hole, newcomers go last",
          "[rdzv]") {
  // Old group of 3 lost rank 0; a new node arrives first.
  const auto out = assign_ranks({node(1, -1, "new"), node(1, 2, "x"), node(1, 1, "y")});
  CHECK(out[2]->group_rank == 1);  // kept
  CHECK(out[0]->group_rank == 0);  // first free rank, in arrival order
  CHECK(out[1]->group_rank == 2);  // 2 < 3 members: kept
}

TEST_CASE("assign_ranks: duplicate previous ranks go to the earlier arrival", "[rdzv]") {
  const auto out = assign_ranks({node(1, 0, "a"), node(1, 0, "b")});
  CHECK(out[0]->group_rank == 0);
  CHECK(out[1]->group_rank == 1);
}

TEST_CASE("assign_ranks: withdrawn slots are skipped", "[rdzv]") {
  const auto out = assign_ranks({node(2, -1, "a"), std::nullopt, node(2, -1, "c")});
  CHECK(out[0]->group_rank == 0);
  CHECK_FALSE(out[1].has_value());
  CHECK(out[2]->group_rank == 1);
  CHECK(out[2]->group_world_size == 2);
  CHECK(out[2]->world_size == 4);
}

TEST_CASE("records and assignments round-trip and reject garbage", "[rdzv]") {
  const NodeRecord r{8, 3, "10.0.0.2:123:abc def"};
  const NodeRecord back = parse_record(format_record(r));
  CHECK(back.nproc == 8);
  CHECK(back.prev_rank == 3);
  CHECK(back.node_id == "10.0.0.2:123:abc def");
  const NodeAssignment a{1, 4, 8, 32, "0123456789abcdef"};
  const NodeAssignment a2 = parse_assignment(format_assignment(a));
  CHECK(a2.group_rank == 1);
  CHECK(a2.world_size == 32);
  CHECK(a2.members == "0123456789abcdef");
  CHECK_THROWS_AS(parse_record("x 1 id"), ddp::ProtocolError);
  CHECK_THROWS_AS(parse_record("0 -1 id"), ddp::ProtocolError);
  CHECK_THROWS_AS(parse_record("2 -1"), ddp::ProtocolError);
  CHECK_THROWS_WITH(parse_assignment("1 2 3"), Catch::Contains("'1 2 3'"));
  CHECK_THROWS_AS(parse_assignment("5 2 0 4 0123456789abcdef"), ddp::ProtocolError);
  CHECK_THROWS_AS(parse_assignment("1 2 0 4"), ddp::ProtocolError);  // no digest
}

TEST_CASE("assign_ranks: the member digest names the set of nodes, not their order", "[rdzv]") {
  const auto ab = assign_ranks({node(1, -1, "a"), node(1, -1, "b")});
  const auto ba = assign_ranks({node(1, 1, "b"), node(1, 0, "a")});
  const auto abc = assign_ranks({node(1, -1, "a"), node(1, -1, "b"), node(1, -1, "c")});
  REQUIRE(ab[0]->members.size() == 16);
  CHECK(ab[0]->members == ab[1]->members);
  CHECK(ab[0]->members == ba[0]->members);
  CHECK(ab[0]->members != abc[0]->members);
}
