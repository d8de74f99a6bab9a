// Contract tests written once and run against every Store implementation.
#include <catch2/catch.hpp>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "rendezvous/store/memory_store.hpp"
#include "rendezvous/store/prefix_store.hpp"
#include "rendezvous/store/server/store_server.hpp"
#include "rendezvous/store/tcp_store.hpp"

using namespace ddp::rendezvous;
using namespace std::chrono_literals;

namespace {
struct MemoryFixture {
  std::shared_ptr<Store> make() { return std::make_shared<MemoryStore>(2s); }
};
struct PrefixFixture {
  std::shared_ptr<Store> make() {
    return std::make_shared<PrefixStore>("/job", std::make_shared<MemoryStore>(2s));
  }
};
// A real server on a kernel-chosen loopback port, and a TcpStore client of it.
struct TcpFixture {
  std::unique_ptr<StoreServer> server;
  std::shared_ptr<Store> make() {
    StoreServerOptions so;
    so.host = "127.0.0.1";
    server = std::make_unique<StoreServer>(so);
    TcpStoreOptions co;
    co.port = server->port();
    co.timeout = 2s;
    co.connect_timeout = 5s;
    return std::make_shared<TcpStore>(co);
  }
};
struct PrefixOverTcpFixture {
  TcpFixture tcp;
  std::shared_ptr<Store> make() { return std::make_shared<PrefixStore>("/worker", tcp.make()); }
};
}  // namespace

#define STORE_FIXTURES MemoryFixture, PrefixFixture, TcpFixture, PrefixOverTcpFixture

TEMPLATE_TEST_CASE("store contract: set/get/add/compare_set", "[store]", STORE_FIXTURES) {
  TestType fixture;
  auto store = fixture.make();
  store->set("a", "1");
  CHECK(store->get("a") == "1");
  CHECK(store->add("n", 5) == 5);
  CHECK(store->add("n", -2) == 3);
  CHECK(store->get("n") == "3");
  CHECK(store->compare_set("c", "", "x") == "x");
  CHECK(store->compare_set("c", "y", "z") == "x");
  CHECK(store->compare_set("c", "x", "z") == "z");
  CHECK(store->compare_set("missing", "e", "z") == "e");
  CHECK_FALSE(store->check({"missing"}));
  CHECK(store->check({"a", "n", "c"}));
}

TEMPLATE_TEST_CASE("store contract: binary values, delete, num_keys, append", "[store]",
                   STORE_FIXTURES) {
  TestType fixture;
  auto store = fixture.make();
  const std::string binary("\0\xff\n\0tail", 8);
  store->set("bin", binary);
  CHECK(store->get("bin") == binary);
  const int64_t before = store->num_keys();
  store->append("log", "ab");
  store->append("log", "cd");
  CHECK(store->get("log") == "abcd");
  CHECK(store->num_keys() == before + 1);
  CHECK(store->delete_key("log"));
  CHECK_FALSE(store->delete_key("log"));
  CHECK(store->num_keys() == before);
  CHECK_FALSE(store->check({"log"}));
}

TEMPLATE_TEST_CASE("store contract: multi_set and multi_get keep order", "[store]",
                   STORE_FIXTURES) {
  TestType fixture;
  auto store = fixture.make();
  store->multi_set({"k1", "k2", "k3"}, {"v1", "", "v3"});
  CHECK(store->multi_get({"k3", "k1", "k2"}) == std::vector<std::string>{"v3", "v1", ""});
  CHECK_THROWS_AS(store->multi_set({"a"}, {}), ddp::ConfigError);
}

TEMPLATE_TEST_CASE("store contract: wait times out naming the key", "[store]", STORE_FIXTURES) {
  TestType fixture;
  auto store = fixture.make();
  REQUIRE_THROWS_AS(store->wait({"never"}, 50ms), ddp::StoreTimeout);
  REQUIRE_THROWS_WITH(store->wait({"never"}, 50ms), Catch::Contains("never"));
}

TEMPLATE_TEST_CASE("store contract: get of a missing key waits up to timeout()", "[store]",
                   STORE_FIXTURES) {
  TestType fixture;
  auto store = fixture.make();
  store->set_timeout(100ms);
  REQUIRE_THROWS_AS(store->get("absent"), ddp::StoreTimeout);
  REQUIRE_THROWS_AS(store->multi_get({"absent"}), ddp::StoreTimeout);
  store->set("present", "yes");  // the store is still usable after timeouts
  CHECK(store->get("present") == "yes");
}

TEMPLATE_TEST_CASE("store contract: a blocked get returns once another client sets", "[store]",
                   STORE_FIXTURES) {
  TestType fixture;
  auto store = fixture.make();
  store->set_timeout(20s);
  auto reader = std::async(std::launch::async, [&] { return store->get("later"); });
  CHECK(reader.wait_for(50ms) == std::future_status::timeout);
  // The same object, from another thread: a blocked get must not hold up other callers.
  std::shared_ptr<Store> writer = store;
  writer->set("later", "value");
  REQUIRE(reader.wait_for(10s) == std::future_status::ready);
  CHECK(reader.get() == "value");
}

TEMPLATE_TEST_CASE("store contract: add on a non-integer or past int64 is refused", "[store]",
                   STORE_FIXTURES) {
  TestType fixture;
  auto store = fixture.make();
  store->set("text", "abc");
  // Memory stores throw ProtocolError; a TCP server closes that connection (StoreError), and
  // the client reconnects on its next call.
  CHECK_THROWS_AS(store->add("text", 1), ddp::Error);
  store->set("big", std::to_string(INT64_MAX));
  CHECK_THROWS_AS(store->add("big", 1), ddp::Error);
  CHECK(store->get("big") == std::to_string(INT64_MAX));  // unchanged
  CHECK(store->add("fine", 2) == 2);
}

// bench/rdzv's 16k simulated agents fit within one fd limit only with one connection each.
TEST_CASE("TcpStore one_connection: waits and gets hold the one shared connection", "[store]") {
  StoreServer server(StoreServerOptions{"127.0.0.1", 0});
  TcpStoreOptions co;
  co.port = server.port();
  co.timeout = 2s;
  co.connect_timeout = 5s;
  TcpStore other(co);
  co.one_connection = true;
  TcpStore store(co);
  REQUIRE_THROWS_WITH(store.wait({"never"}, 50ms), Catch::Contains("never"));
  store.set("a", "1");  // still in sync after the cancelled wait
  CHECK(store.get("a") == "1");
  CHECK(store.multi_get({"a"}) == std::vector<std::string>{"1"});
  auto waiter = std::async(std::launch::async, [&] { store.wait({"later"}, 10s); });
  CHECK(waiter.wait_for(50ms) == std::future_status::timeout);
  other.set("later", "x");
  REQUIRE(waiter.wait_for(10s) == std::future_status::ready);
  waiter.get();
  CHECK(server.num_connections() == 2);  // one each: no wait connection was opened
}

// Presence (docs/store.md, "Our own extension"); the rest is in presence_test.cpp.
TEMPLATE_TEST_CASE("presence: ephemeral keys live with it, and an orderly leave fires nothing",
                   "[store][presence]", STORE_FIXTURES) {
  TestType fixture;
  auto store = fixture.make();
  {
    auto presence = store->open_presence();
    REQUIRE(presence != nullptr);
    presence->set_ephemeral("alive/1", "pid 42");
    presence->on_close("lost", "node 1");
    CHECK(store->get("alive/1") == "pid 42");
    CHECK_FALSE(store->check({"lost"}));
    presence->clear();
    CHECK_FALSE(store->check({"alive/1"}));
    presence->set_ephemeral("alive/1", "again");
    CHECK(store->check({"alive/1"}));
  }
  CHECK_FALSE(store->check({"alive/1"}));
  CHECK_FALSE(store->check({"lost"}));
}
