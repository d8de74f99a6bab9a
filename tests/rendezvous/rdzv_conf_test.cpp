// --rdzv_conf and --rdzv_endpoint.
#include "rendezvous/rdzv_conf.hpp"

#include <catch2/catch.hpp>
#include <future>

#include "common/error.hpp"
#include "rendezvous/store/memory_store.hpp"

using namespace ddp::rendezvous;
using namespace std::chrono_literals;

TEST_CASE("rdzv_conf: torchrun keys, units and the keep-alive pair", "[rdzv][conf]") {
  const auto conf = parse_rdzv_conf(
      "join_timeout=900,last_call_timeout=2.5,close_timeout=500ms,is_host=False,"
      "keep_alive_interval=2,keep_alive_max_attempt=3,read_timeout=60");
  CHECK(conf.join_timeout == 900s);
  CHECK(conf.last_call_timeout == 2500ms);
  CHECK(conf.close_timeout == 500ms);
  CHECK(conf.is_host == false);
  CHECK(conf.heartbeat_interval == 2s);
  CHECK(conf.lease_timeout == 6s);
  CHECK(conf.ignored == std::vector<std::string>{"read_timeout"});
  CHECK(parse_rdzv_conf("").join_timeout == std::nullopt);
  CHECK(parse_rdzv_conf("lease_timeout=1m").lease_timeout == 60s);
}

TEST_CASE("rdzv_conf: the etcd backend's keys", "[rdzv][conf][etcd]") {
  const auto conf = parse_rdzv_conf(
      "protocol=https,cacert=/etc/ca.pem,cert=/etc/c.pem,key=/etc/c.key,user=ddp,"
      "password_file=/etc/pw");
  CHECK(conf.protocol == "https");
  CHECK(conf.cacert == "/etc/ca.pem");
  CHECK(conf.cert == "/etc/c.pem");
  CHECK(conf.key == "/etc/c.key");
  CHECK(conf.user == "ddp");
  CHECK(conf.password_file == "/etc/pw");
  CHECK(conf.ignored.empty());
  CHECK_THROWS_WITH(parse_rdzv_conf("protocol=grpc"),
                    Catch::Contains("protocol=grpc") && Catch::Contains("http or https"));
  CHECK_THROWS_WITH(parse_rdzv_conf("cacert="), Catch::Contains("cacert=: expected a value"));
  CHECK(format_endpoint(parse_endpoint("[fd00::1]:5", 1)) == "[fd00::1]:5");
  CHECK(format_endpoint(parse_endpoint("node1", 2379)) == "node1:2379");
}

TEST_CASE("rdzv_conf: bad items are named with what was expected", "[rdzv][conf]") {
  CHECK_THROWS_WITH(parse_rdzv_conf("join_timeout"), Catch::Contains("expected key=value"));
  CHECK_THROWS_WITH(parse_rdzv_conf("join_timeout=ten"),
                    Catch::Contains("join_timeout=ten") && Catch::Contains("duration"));
  CHECK_THROWS_WITH(parse_rdzv_conf("join_timeout=-1"), Catch::Contains("non-negative"));
  CHECK_THROWS_WITH(parse_rdzv_conf("join_timeout=5h"), Catch::Contains("5h"));
  CHECK_THROWS_WITH(parse_rdzv_conf("is_host=maybe"), Catch::Contains("is_host=maybe"));
  CHECK_THROWS_WITH(parse_rdzv_conf("jion_timeout=5"), Catch::Contains("'jion_timeout'"));
  CHECK_THROWS_WITH(parse_rdzv_conf("keep_alive_max_attempt=0"), Catch::Contains(">= 1"));
}

TEST_CASE("rdzv_endpoint: host:port, host, [v6]:port", "[rdzv][conf]") {
  CHECK(parse_endpoint("node1:29401", 29400).host == "node1");
  CHECK(parse_endpoint("node1:29401", 29400).port == 29401);
  CHECK(parse_endpoint("node1", 29400).port == 29400);
  CHECK(parse_endpoint("[::1]:5", 29400).host == "::1");
  CHECK(parse_endpoint("[::1]:5", 29400).port == 5);
  for (const char* bad : {"", ":29400", "h:0", "h:70000", "h:12x", "[::1", "[::1]x",
                          "h:", "[::1]:", "[]:5", "[::1]:0"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_endpoint(bad, 29400), ddp::ConfigError);
  }
}

TEST_CASE("rdzv_endpoint: IPv6 with and without brackets and port", "[rdzv][conf][ipv6]") {
  struct Row {
    std::string text;
    std::string host;
    uint16_t port;
  };
  const std::vector<Row> table{
      {"[::1]:29401", "::1", 29401},
      {"[::1]", "::1", 29400},                  // no port: the default, not an error
      {"::1", "::1", 29400},                    // bare: all host (not host ':' port 1)
      {"fd00::2", "fd00::2", 29400},            //
      {"[0:0:0:0:0:0:0:1]:5", "::1", 5},        // canonical form, as workers get it
      {"[fe80::1%eth0]:7", "fe80::1%eth0", 7},  // a link-local scope survives
      {"127.0.0.1:29401", "127.0.0.1", 29401},  //
      {"node1", "node1", 29400},                //
  };
  for (const auto& row : table) {
    INFO(row.text);
    const auto ep = parse_endpoint(row.text, 29400);
    CHECK(ep.host == row.host);
    CHECK(ep.port == row.port);
  }
  // A port after an unbracketed IPv6 address cannot be told apart from the address.
  CHECK_THROWS_WITH(parse_endpoint("fd00::1:29400", 29400),
                    Catch::Contains("'fd00::1:29400'") && Catch::Contains("[fd00::1]:29400"));
  CHECK_THROWS_WITH(parse_endpoint("[::1]x", 29400),
                    Catch::Contains("'[::1]x'") && Catch::Contains("after ']'"));
  CHECK_THROWS_WITH(parse_endpoint("[::1", 29400), Catch::Contains("'[::1'"));
}
