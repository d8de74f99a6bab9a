// Where a store this agent hosts listens and what its clients dial (one node, several nodes,
// --store_bind), and how the workers' namespace is declared: on the store it serves, else over
// a connection of its own.
#include "launcher/rendezvous_setup/store_hosting.hpp"

#include <catch2/catch.hpp>
#include <string>

#include "common/error.hpp"
#include "common/host_address.hpp"
#include "rendezvous/store/memory_store.hpp"

using namespace ddp::launcher;

namespace {

StoreHostingOptions one_node(const std::string& dial) {
  StoreHostingOptions o;
  o.reach = StoreReach::kThisMachine;
  o.dial_host = dial;
  return o;
}

StoreHostingOptions other_nodes(const std::string& dial) {
  StoreHostingOptions o;
  o.reach = StoreReach::kOtherNodes;
  o.dial_host = dial;
  return o;
}

}  // namespace

TEST_CASE("store hosting: one node listens on loopback and its workers dial it",
          "[store_hosting]") {
  struct Row {
    std::string dial;
    std::string host;  // listens on, and what the workers dial
    bool noted;        // a line says MASTER_ADDR changed
  };
  const Row table[] = {
      {"127.0.0.1", "127.0.0.1", false},
      {"127.0.0.2", "127.0.0.2", false},
      {"localhost", "127.0.0.1", true},
      {"10.1.2.3", "127.0.0.1", true},
      {"::1", "::1", false},
      {"fd00::7", "::1", true},
  };
  for (const auto& row : table) {
    INFO(row.dial);
    const auto listen = choose_store_listen(one_node(row.dial), /*have_ipv6=*/true);
    CHECK(listen.host == row.host);
    CHECK(listen.dial == row.host);
    CHECK_FALSE(listen.warn);
    if (row.noted) {
      CHECK(listen.note == "single-node job: the store listens on " + row.host +
                               " only, and workers get MASTER_ADDR=" + row.host +
                               " instead of --master_addr " + row.dial +
                               " (--store_bind ADDR to listen elsewhere)");
    } else {
      CHECK(listen.note.empty());
    }
  }
}

TEST_CASE("store hosting: --store_bind wins and leaves what clients dial alone",
          "[store_hosting]") {
  for (auto reach : {StoreReach::kThisMachine, StoreReach::kOtherNodes}) {
    auto o = reach == StoreReach::kThisMachine ? one_node("localhost") : other_nodes("10.1.2.3");
    o.bind = "[::1]";
    // No IPv6 check either: the bind address is the user's word.
    const auto listen = choose_store_listen(o, /*have_ipv6=*/false);
    CHECK(listen.host == "::1");
    CHECK(listen.dial == o.dial_host);
    CHECK(listen.note.empty());
  }
}

TEST_CASE("store hosting: several nodes listen where they dial, else everywhere with a warning",
          "[store_hosting]") {
  SECTION("a loopback address: every node is on this machine") {
    const auto listen = choose_store_listen(other_nodes("127.0.0.1"), true);
    CHECK(listen.host == "127.0.0.1");
    CHECK(listen.dial == "127.0.0.1");
    CHECK(listen.note.empty());
  }
  SECTION("an address this machine does not have: every interface, said once") {
    auto o = other_nodes("192.0.2.1");  // TEST-NET-1: nobody's
    o.name = "the workers' store";
    const auto listen = choose_store_listen(o, true);
    CHECK(listen.host == ddp::kAnyHost);
    CHECK(listen.dial == "192.0.2.1");
    CHECK(listen.warn);
    CHECK(listen.note.rfind("the workers' store listens on every interface: ", 0) == 0);
    CHECK(listen.note.find("; --store_bind ADDR narrows it to one address") != std::string::npos);
  }
  SECTION("--local_addr of this machine narrows it when the dialled name is not") {
    auto o = other_nodes("192.0.2.1");
    o.local_addr = "127.0.0.1";
    const auto listen = choose_store_listen(o, true);
    CHECK(listen.host == "127.0.0.1");
    CHECK_FALSE(listen.warn);
  }
}

TEST_CASE("store hosting: an IPv6 address on a machine without IPv6 is a usage error",
          "[store_hosting]") {
  CHECK_THROWS_AS(choose_store_listen(one_node("::1"), false), ddp::ConfigError);
  CHECK_THROWS_AS(choose_store_listen(other_nodes("fd00::7"), false), ddp::ConfigError);
}

TEST_CASE("store hosting: the store it hosts listens as chosen", "[store_hosting]") {
  auto o = one_node("localhost");
  const auto hosted = host_store(o);
  REQUIRE(hosted.server != nullptr);
  CHECK(hosted.server->host() == "127.0.0.1");
  CHECK(hosted.dial == "127.0.0.1");
  CHECK(hosted.server->port() != 0);
}

TEST_CASE("store hosting: the namespace goes to the served store, else through a connection",
          "[store_hosting]") {
  int connects = 0;
  const ddp::rendezvous::StoreConnector connect = [&]() -> std::shared_ptr<ddp::rendezvous::Store> {
    ++connects;
    return std::make_shared<ddp::rendezvous::MemoryStore>();  // no dialect: ignored
  };
  SECTION("served here: no connection is opened") {
    const auto hosted = host_store(one_node("127.0.0.1"));
    worker_namespace_setter(hosted.server.get(), connect)("/worker/attempt_1/");
    CHECK(connects == 0);
  }
  SECTION("served elsewhere: one connection per declaration") {
    const auto setter = worker_namespace_setter(nullptr, connect);
    setter("/worker/attempt_0/");
    setter("/worker/attempt_1/");
    CHECK(connects == 2);
  }
  SECTION("neither: nothing to do") {
    CHECK_NOTHROW(declare_worker_namespace(nullptr, nullptr, "/worker/attempt_0/"));
  }
}
