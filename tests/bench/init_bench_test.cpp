// init_bench: the rank script sends what PyTorch's client sends, in order, and a short run of
// the whole pattern against the real server gets every rank through every phase.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "init_load.hpp"
#include "rank_script.hpp"
#include "rendezvous/store/server/store_server.hpp"
#include "rendezvous/store/wire_codec.hpp"

using namespace ddp::bench;
namespace wire = ddp::rendezvous::wire;

namespace {

// The requests in bytes, decoded (every one must be complete).
std::vector<wire::Request> requests(std::string bytes) {
  std::vector<wire::Request> out;
  while (!bytes.empty()) {
    auto parsed = wire::parse_request(bytes, wire::Dialect::kV2, wire::Limits{});
    REQUIRE(parsed.status == wire::ParseStatus::kComplete);
    out.push_back(parsed.request);
    bytes.erase(0, parsed.consumed);
  }
  return out;
}

std::string u8(uint8_t v) {
  std::string s;
  wire::put_u8(s, v);
  return s;
}
std::string i64(int64_t v) {
  std::string s;
  wire::put_i64(s, v);
  return s;
}
std::string str(const std::string& v) {
  std::string s;
  wire::put_string(s, v);
  return s;
}

}  // namespace

TEST_CASE("a rank sends what init_process_group and the store barrier send", "[init_bench]") {
  InitPattern pattern;
  pattern.ranks = 4;
  pattern.peers = 2;
  pattern.value_bytes = 3;
  RankScript rank(2, pattern);

  auto hello = requests(rank.start());
  REQUIRE(hello.size() == 2);
  CHECK(hello[0].command == wire::Command::kValidate);
  CHECK(hello[0].nonce == wire::kValidationMagic);
  CHECK(hello[1].command == wire::Command::kPing);
  CHECK(rank.phase() == InitPhase::kConnect);

  std::string echo;
  wire::put_u32(echo, hello[1].nonce);
  auto step = requests(rank.received(echo).send);
  CHECK(rank.phase() == InitPhase::kInit);
  REQUIRE(step.size() == 1);
  CHECK(step[0].command == wire::Command::kAdd);
  CHECK(step[0].keys[0] == "init/");
  CHECK(step[0].delta == 1);

  // Not rank 0: straight on to its address and rank 0's.
  step = requests(rank.received(i64(3)).send);
  CHECK(rank.phase() == InitPhase::kExchange);
  REQUIRE(step.size() == 2);
  CHECK(step[0].command == wire::Command::kSet);
  CHECK(step[0].keys[0] == "addr/2");
  CHECK(step[0].values[0] == "aaa");
  CHECK(step[1].command == wire::Command::kWait);
  CHECK(step[1].keys == std::vector<std::string>{"addr/0"});

  // A reply split anywhere is still one reply.
  step = requests(rank.received(u8(wire::kWaitStopWaiting)).send);
  REQUIRE(step.size() == 1);
  CHECK(step[0].command == wire::Command::kGet);
  const std::string value = str("xyz");
  CHECK(rank.received(value.substr(0, 5)).send.empty());
  step = requests(rank.received(value.substr(5)).send);
  REQUIRE(step.size() == 1);  // the second peer: the next rank, wrapping
  CHECK(step[0].command == wire::Command::kWait);
  CHECK(step[0].keys == std::vector<std::string>{"addr/3"});
  step = requests(rank.received(u8(wire::kWaitStopWaiting)).send);
  REQUIRE(step.size() == 1);
  CHECK(step[0].keys[0] == "addr/3");
  step = requests(rank.received(value).send);
  CHECK(rank.phase() == InitPhase::kBarrier);
  REQUIRE(step.size() == 1);
  CHECK(step[0].command == wire::Command::kAdd);
  CHECK(step[0].keys[0] == "store_based_barrier_key:1");

  step = requests(rank.received(i64(4)).send);
  REQUIRE(step.size() == 1);
  CHECK(step[0].delta == 0);  // reads the count
  // It counted all 4: it is the last worker and says so before it waits.
  step = requests(rank.received(i64(4)).send);
  REQUIRE(step.size() == 2);
  CHECK(step[0].command == wire::Command::kSet);
  CHECK(step[0].keys[0] == "store_based_barrier_key:1:last_worker");
  CHECK(step[1].command == wire::Command::kWait);
  CHECK(rank.received(u8(wire::kWaitStopWaiting)).send.empty());
  CHECK(rank.phase() == InitPhase::kDone);
  CHECK_THROWS(rank.received(u8(0)));  // nothing was asked
}

TEST_CASE("rank 0 reads the init counter until every rank added to it", "[init_bench]") {
  InitPattern pattern;
  pattern.ranks = 3;
  RankScript rank(0, pattern);
  std::string echo;
  wire::put_u32(echo, requests(rank.start())[1].nonce);
  rank.received(echo);
  auto step = requests(rank.received(i64(1)).send);
  REQUIRE(step.size() == 1);
  CHECK(step[0].command == wire::Command::kWait);
  CHECK(step[0].keys[0] == "init/");
  step = requests(rank.received(u8(wire::kWaitStopWaiting)).send);
  CHECK(step[0].command == wire::Command::kGet);
  const ScriptStep sleep = rank.received(str("2"));
  CHECK(sleep.poll_later);
  CHECK(sleep.send.empty());
  CHECK(rank.phase() == InitPhase::kInit);
  CHECK(requests(rank.resume())[0].command == wire::Command::kWait);
  rank.received(u8(wire::kWaitStopWaiting));
  step = requests(rank.received(str("3")).send);
  CHECK(rank.phase() == InitPhase::kExchange);
  CHECK(step[0].keys[0] == "addr/0");
}

TEST_CASE("300 ranks get through init and the barrier against the real server", "[init_bench]") {
  ddp::rendezvous::StoreServerOptions server_options;
  server_options.host = "127.0.0.1";
  ddp::rendezvous::StoreServer server(server_options);
  InitLoadOptions options;
  options.port = server.port();
  options.pattern.ranks = 300;
  options.pattern.peers = 2;
  options.window = 64;
  options.sources = 2;
  options.stall_seconds = 30;
  const InitLoadResult result = run_init_load(options);
  REQUIRE(result.ranks.size() == 300);
  for (const RankTimes& t : result.ranks) {
    CHECK(t.connect_started <= t.connected);
    CHECK(t.connected <= t.initialized);
    CHECK(t.initialized <= t.exchanged);
    CHECK(t.exchanged <= t.done);
  }
}
