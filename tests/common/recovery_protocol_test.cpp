// The in-place recovery line protocol: format/parse round trips, the round notice, and bad
// lines that name what is wrong.
#include "common/recovery_protocol.hpp"

#include <catch2/catch.hpp>

#include "common/error.hpp"

using namespace ddp::recovery;
using Catch::Matchers::Contains;

TEST_CASE("recovery lines round-trip through format and parse", "[recovery_protocol]") {
  Message joined{std::string(kJoined), {}};
  joined.set("round", 4).set("rank", 1).set("step", int64_t{9000000000}).set("source", -1);
  joined.set("state_bytes", 0);
  const std::string line = format(joined);
  CHECK(line == "joined rank=1 round=4 source=-1 state_bytes=0 step=9000000000\n");
  std::string error;
  auto parsed = parse(line, &error);
  REQUIRE(parsed);
  CHECK(*parsed == joined);
  CHECK(parsed->integer("step") == 9000000000);
  CHECK(parsed->integer("source", -1) == -1);
}

TEST_CASE("the round notice converts to a message and back", "[recovery_protocol]") {
  RoundNotice notice;
  notice.round = 3;
  notice.rank = 1;
  notice.world_size = 2;
  notice.group_rank = 1;
  notice.group_world_size = 2;
  notice.master_addr = "127.0.0.1";
  notice.master_port = 29400;
  notice.restart_count = 0;
  auto parsed = parse(format(notice.to_message()), nullptr);
  REQUIRE(parsed);
  CHECK(RoundNotice::from_message(*parsed) == notice);

  Message missing = notice.to_message();
  missing.fields.erase("world_size");
  CHECK_THROWS_WITH(RoundNotice::from_message(missing), Contains("world_size"));

  // local_rank: sent when known (a standby worker learns it here), absent from older agents.
  CHECK(notice.to_message().fields.count("local_rank") == 0);
  notice.local_rank = 5;
  const Message with_local = notice.to_message();
  CHECK(with_local.text("local_rank") == "5");
  CHECK(RoundNotice::from_message(with_local) == notice);
  Message bad_local = with_local;
  bad_local.fields["local_rank"] = "-2";
  CHECK_THROWS_WITH(RoundNotice::from_message(bad_local), Contains("local_rank"));
}

TEST_CASE("bad recovery lines are refused with the reason", "[recovery_protocol]") {
  std::string error;
  CHECK_FALSE(parse("", &error));
  CHECK_FALSE(parse("abort round", &error));
  CHECK_THAT(error, Contains("round"));
  CHECK_FALSE(parse("abort  round=1", &error));
  CHECK_FALSE(parse("ab-ort round=1", &error));
  CHECK_THAT(error, Contains("ab-ort"));
  CHECK_FALSE(parse(std::string(kMaxLineBytes + 10, 'a'), &error));
  CHECK_THAT(error, Contains("bytes"));
  // Unknown keys are kept (a later agent may add some); a missing one is named on use.
  auto extra = parse("abort round=2 reason=node_lost future=1\n", &error);
  REQUIRE(extra);
  CHECK(extra->text("reason") == "node_lost");
  CHECK_THROWS_AS(extra->integer("missing"), ddp::ProtocolError);
  const Message bad_value{"abort", {{"round", "x"}}};
  CHECK_THROWS_WITH(bad_value.integer("round"), Contains("round"));
}
