// Contract tests written once and run against every Store implementation.
#include <catch2/catch.hpp>
#include <memory>
#include <thread>

#include "common/error.hpp"
#include "rendezvous/memory_store.hpp"
#include "rendezvous/prefix_store.hpp"

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
}  // namespace

TEMPLATE_TEST_CASE("store contract: set/get/add/compare_set", "[store]", MemoryFixture,
                   PrefixFixture) {
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
}

TEMPLATE_TEST_CASE("store contract: wait times out naming the key", "[store]", MemoryFixture,
                   PrefixFixture) {
  TestType fixture;
  auto store = fixture.make();
  REQUIRE_THROWS_AS(store->wait({"never"}, 50ms), ddp::StoreTimeout);
  REQUIRE_THROWS_WITH(store->wait({"never"}, 50ms), Catch::Contains("never"));
}
