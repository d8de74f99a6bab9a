#pragma once
// The Store contract, written once: every TEMPLATE_TEST_CASE here runs against each fixture
// of STORE_FIXTURES, which the including test file defines (a fixture's make() returns a
// fresh, empty-looking store). store_contract_test.cpp runs it on the memory, prefix and TCP
// stores; etcd_store_test.cpp on EtcdStore against a real etcd.
#include <catch2/catch.hpp>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "rendezvous/store/store.hpp"

#ifndef STORE_FIXTURES
#error "define STORE_FIXTURES (the fixture types) before including store_contract_cases.hpp"
#endif

// The cases name Store and the chrono literals unqualified: the including file has
// `using namespace ddp::rendezvous;` and `using namespace std::chrono_literals;`.

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
