// The Store contract (store_contract_cases.hpp) on the memory, prefix and TCP stores, and
// the TCP store's own cases.
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

#include "tests/store/store_contract_cases.hpp"

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
