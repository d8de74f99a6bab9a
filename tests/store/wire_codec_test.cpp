// The pure wire codec: dialect detection, framing, limits, encoding. No sockets.
#include "rendezvous/store/wire_codec.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <string>

#include "common/error.hpp"

using namespace ddp::rendezvous::wire;

namespace {
std::string bytes(std::initializer_list<int> list) {
  std::string s;
  for (int b : list) s.push_back(static_cast<char>(b));
  return s;
}
std::string str(std::string_view s) {
  std::string out;
  put_string(out, s);
  return out;
}
}  // namespace

TEST_CASE("detect_dialect: VALIDATE + magic is 2.x, anything else is legacy", "[codec]") {
  auto v2 = detect_dialect(bytes({0x00, 0xCE, 0xF7, 0x85, 0x3C}));
  CHECK(v2.status == ParseStatus::kComplete);
  CHECK(v2.dialect == Dialect::kV2);
  CHECK(v2.consumed == kHandshakeBytes);

  // A 1.13 SET starts with 0x00 too, followed by the key length.
  auto legacy_set = detect_dialect(bytes({0x00, 0x03, 0, 0, 0, 0, 0, 0, 0}));
  CHECK(legacy_set.dialect == Dialect::kLegacy);
  CHECK(legacy_set.consumed == 0);

  auto legacy_get = detect_dialect(bytes({0x02}));
  CHECK(legacy_get.dialect == Dialect::kLegacy);

  CHECK(detect_dialect(bytes({0x00, 0xCE})).status == ParseStatus::kNeedMore);
  CHECK(detect_dialect("").status == ParseStatus::kNeedMore);
}

TEST_CASE("parse_request: the same SET in both dialects", "[codec]") {
  const std::string body = str("key") + str("value");
  auto v2 = parse_request(bytes({1}) + body, Dialect::kV2, Limits{});
  auto legacy = parse_request(bytes({0}) + body, Dialect::kLegacy, Limits{});
  for (const auto* r : {&v2, &legacy}) {
    REQUIRE(r->status == ParseStatus::kComplete);
    CHECK(r->request.command == Command::kSet);
    CHECK(r->request.keys == std::vector<std::string>{"key"});
    CHECK(r->request.values == std::vector<std::string>{"value"});
    CHECK(r->consumed == 1 + body.size());
  }
}

TEST_CASE("parse_request: every prefix of a frame needs more, with a useful hint", "[codec]") {
  std::string frame = bytes({11});  // 2.x MULTI_SET
  put_u64(frame, 2);
  frame += str("a") + str("1") + str("bb") + str("22");
  for (size_t n = 0; n < frame.size(); ++n) {
    auto r = parse_request(std::string_view(frame).substr(0, n), Dialect::kV2, Limits{});
    INFO("prefix " << n);
    REQUIRE(r.status == ParseStatus::kNeedMore);
    CHECK(r.needed > n);
    CHECK(r.needed <= frame.size());
  }
  auto full = parse_request(frame + "trailing", Dialect::kV2, Limits{});
  REQUIRE(full.status == ParseStatus::kComplete);
  CHECK(full.consumed == frame.size());
  CHECK(full.request.keys == std::vector<std::string>{"a", "bb"});
  CHECK(full.request.values == std::vector<std::string>{"1", "22"});
}

// The closing node of a 16k-node rendezvous sends WAIT and MULTI_GET of 16k keys and a
// MULTI_SET of 16k pairs; the io_uring server receives them in 2 KiB pieces. Re-scanning
// the frame at every piece was quadratic (~700 scans of up to 16k items per frame).
TEST_CASE("parse_request: a large frame in small pieces is scanned a few dozen times", "[codec]") {
  constexpr uint64_t kKeys = 16384;
  for (const int command : {6, 11}) {  // 2.x WAIT, MULTI_SET
    std::string frame = bytes({command});
    put_u64(frame, kKeys);
    for (uint64_t i = 0; i < kKeys; ++i) {
      frame += str("/ddp_rdzv/job/r0/node/" + std::to_string(i + 1));
      if (command == 11) frame += str("0 16384 0 131072 0123456789abcdef");
    }
    Limits limits;
    limits.max_keys_per_request = kKeys;
    // As StoreSession does: parse again only once the hint's bytes are there.
    size_t have = 0;
    size_t needed = 0;
    int scans = 0;
    ParseResult r;
    while (true) {
      have = std::min(frame.size(), have + 2048);
      if (have < needed) continue;
      ++scans;
      r = parse_request(std::string_view(frame).substr(0, have), Dialect::kV2, limits);
      if (r.status != ParseStatus::kNeedMore) break;
      REQUIRE(r.needed <= frame.size());  // a lower bound: never waits for bytes not coming
      needed = r.needed;
    }
    INFO("command " << command << ", " << frame.size() << " bytes");
    REQUIRE(r.status == ParseStatus::kComplete);
    CHECK(r.request.keys.size() == kKeys);
    CHECK(scans < 60);
  }
}

TEST_CASE("parse_request: limits are enforced before the bytes arrive", "[codec]") {
  Limits limits;
  limits.max_key_bytes = 16;
  limits.max_value_bytes = 32;
  limits.max_keys_per_request = 4;

  std::string huge_key = bytes({3});  // 2.x GET, key length 1 TB, no bytes follow
  put_u64(huge_key, 1ULL << 40);
  auto r = parse_request(huge_key, Dialect::kV2, limits);
  CHECK(r.status == ParseStatus::kBad);
  CHECK_THAT(r.error, Catch::Contains("1099511627776") && Catch::Contains("16"));

  std::string big_value = bytes({1}) + str("k");
  put_u64(big_value, 33);
  CHECK(parse_request(big_value, Dialect::kV2, limits).status == ParseStatus::kBad);

  std::string many = bytes({6});  // 2.x WAIT with 5 keys
  put_u64(many, 5);
  auto w = parse_request(many, Dialect::kV2, limits);
  CHECK(w.status == ParseStatus::kBad);
  CHECK_THAT(w.error, Catch::Contains("key count 5"));
}

TEST_CASE("parse_request: unknown commands are bad, per dialect", "[codec]") {
  CHECK(parse_request(bytes({19}), Dialect::kV2, Limits{}).status == ParseStatus::kBad);
  CHECK(parse_request(bytes({9}), Dialect::kLegacy, Limits{}).status == ParseStatus::kBad);
  CHECK(parse_request(bytes({13}), Dialect::kLegacy, Limits{}).status == ParseStatus::kBad);
  CHECK(parse_request(bytes({0xFF}), Dialect::kV2, Limits{}).status == ParseStatus::kBad);
  auto r = parse_request(bytes({200}), Dialect::kLegacy, Limits{});
  CHECK_THAT(r.error, Catch::Contains("200"));
  // WATCH_KEY exists only in the legacy dialect; PING only in 2.x.
  CHECK(parse_request(bytes({7}) + str("k"), Dialect::kLegacy, Limits{}).request.command ==
        Command::kWatchKey);
  CHECK(parse_request(bytes({13, 1, 2, 3, 4}), Dialect::kV2, Limits{}).request.nonce ==
        0x04030201u);
}

TEST_CASE("encode_request round-trips through parse_request", "[codec]") {
  Request add;
  add.command = Command::kAdd;
  add.keys = {"counter"};
  add.delta = -42;
  Request cas;
  cas.command = Command::kCompareSet;
  cas.keys = {"k"};
  cas.values = {"", std::string("\0bin\xff", 5)};
  Request wait;
  wait.command = Command::kWait;
  wait.keys = {"a", "b", "c"};
  for (auto dialect : {Dialect::kV2, Dialect::kLegacy}) {
    for (const auto& req : {add, cas, wait}) {
      const std::string frame = encode_request(req, dialect);
      auto r = parse_request(frame, dialect, Limits{});
      REQUIRE(r.status == ParseStatus::kComplete);
      CHECK(r.consumed == frame.size());
      CHECK(r.request.command == req.command);
      CHECK(r.request.keys == req.keys);
      CHECK(r.request.values == req.values);
      CHECK(r.request.delta == req.delta);
    }
  }
  Request ping;
  ping.command = Command::kPing;
  CHECK_THROWS_AS(encode_request(ping, Dialect::kLegacy), ddp::ProtocolError);
}

TEST_CASE("the authentication commands exist in kNative only, bytes 0x43-0x45", "[codec][auth]") {
  Request challenge;
  challenge.command = Command::kAuthChallenge;
  Request proof;
  proof.command = Command::kAuthProof;
  proof.keys = {std::string(32, 'n')};
  proof.values = {std::string(32, 'm')};
  Request ns;
  ns.command = Command::kWorkerNamespace;
  ns.keys = {"/worker/attempt_2/"};
  int byte = 0x43;
  for (const auto& req : {challenge, proof, ns}) {
    const std::string frame = encode_request(req, Dialect::kNative);
    CHECK(static_cast<uint8_t>(frame[0]) == byte++);
    auto r = parse_request(frame, Dialect::kNative, Limits{});
    REQUIRE(r.status == ParseStatus::kComplete);
    CHECK(r.consumed == frame.size());
    CHECK(r.request.command == req.command);
    CHECK(r.request.keys == req.keys);
    CHECK(r.request.values == req.values);
    // A PyTorch connection that sends these bytes sent an unknown command.
    CHECK(parse_request(frame, Dialect::kV2, Limits{}).status == ParseStatus::kBad);
    CHECK_THROWS_AS(encode_request(req, Dialect::kV2), ddp::ProtocolError);
  }
  CHECK(std::string(command_name(Command::kWorkerNamespace)) == "WORKER_NAMESPACE");
}

TEST_CASE("encode: 2.x handshake and ADD bytes are PyTorch's", "[codec]") {
  Request hello;
  hello.command = Command::kValidate;
  hello.nonce = kValidationMagic;
  CHECK(encode_request(hello, Dialect::kV2) == bytes({0x00, 0xCE, 0xF7, 0x85, 0x3C}));
  Request add;
  add.command = Command::kAdd;
  add.keys = {"k"};
  add.delta = 1;
  CHECK(encode_request(add, Dialect::kV2) ==
        bytes({4, 1, 0, 0, 0, 0, 0, 0, 0, 'k', 1, 0, 0, 0, 0, 0, 0, 0}));
  CHECK(encode_request(add, Dialect::kLegacy)[0] == 3);
}

TEST_CASE("refine_legacy: what only PyTorch 2.1 sends makes a legacy connection 2.1's",
          "[codec][dialect]") {
  using ddp::rendezvous::wire::LegacyRole;
  auto refine = [](const std::string& b, LegacyRole role) { return refine_legacy(b, role); };
  // 9-11: MULTI_GET, MULTI_SET, CANCEL_WAIT exist only in 2.1.
  for (uint8_t byte : {9, 10, 11}) {
    CHECK(refine(bytes({byte}), LegacyRole::kMain).dialect == Dialect::kLegacy21);
  }
  // 0-6 mean the same in both.
  CHECK(refine(bytes({3}) + str("k"), LegacyRole::kFresh).dialect == Dialect::kLegacy);
  // 7: WATCH_KEY first on a 1.13/2.0 watch connection; DELETE_KEY on a main one (2.1).
  CHECK(refine(bytes({7}) + str("k"), LegacyRole::kFresh).dialect == Dialect::kLegacy);
  CHECK(refine(bytes({7}) + str("k"), LegacyRole::kMain).dialect == Dialect::kLegacy21);
  // 8: DELETE_KEY (nothing after the key) or APPEND (a value follows in the same write).
  CHECK(refine(bytes({8}) + str("k"), LegacyRole::kMain).dialect == Dialect::kLegacy);
  CHECK(refine(bytes({8}) + str("k") + str("v"), LegacyRole::kMain).dialect == Dialect::kLegacy21);
  CHECK(refine(bytes({8}) + str("k").substr(0, 5), LegacyRole::kMain).status ==
        ParseStatus::kNeedMore);
  // Each 2.1 table entry round-trips.
  for (auto command : {Command::kDeleteKey, Command::kAppend, Command::kMultiGet,
                       Command::kMultiSet, Command::kCancelWait}) {
    CHECK(command_byte(command, Dialect::kLegacy21) >= 7);
    CHECK((command_byte(command, Dialect::kLegacy) < 0 || command == Command::kDeleteKey));
  }
  CHECK(command_byte(Command::kWatchKey, Dialect::kLegacy21) == -1);
}

TEST_CASE("2.8+ and newest commands: bytes 14-18, their arguments", "[codec][dialect]") {
  CHECK(command_byte(Command::kQueuePush, Dialect::kV2) == 14);
  CHECK(command_byte(Command::kQueuePop, Dialect::kV2) == 15);
  CHECK(command_byte(Command::kQueueLen, Dialect::kV2) == 16);
  CHECK(command_byte(Command::kListKeys, Dialect::kV2) == 17);
  CHECK(command_byte(Command::kBarrier, Dialect::kV2) == 18);
  CHECK(command_byte(Command::kQueuePush, Dialect::kLegacy21) == -1);
  Request barrier;
  barrier.command = Command::kBarrier;
  barrier.keys = {"b"};
  barrier.delta = 16;
  const auto frame = encode_request(barrier, Dialect::kV2);
  auto r = parse_request(frame, Dialect::kV2, Limits{});
  REQUIRE(r.status == ParseStatus::kComplete);
  CHECK(r.request.delta == 16);
  CHECK(parse_request(bytes({17}), Dialect::kV2, Limits{}).request.command == Command::kListKeys);
  Request push;
  push.command = Command::kQueuePush;
  push.keys = {"q"};
  push.values = {"item"};
  r = parse_request(encode_request(push, Dialect::kV2), Dialect::kV2, Limits{});
  REQUIRE(r.status == ParseStatus::kComplete);
  CHECK(r.request.values == std::vector<std::string>{"item"});
}
