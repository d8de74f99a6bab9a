// Dead-peer detection on store connections: every connection a TcpStore client opens (its
// request connection and its wait connections) and every accepted connection that negotiated
// our dialect (not PyTorch's) carries keepalive and TCP_USER_TIMEOUT (common/tcp_liveness.hpp),
// read back with getsockopt on this process's own sockets; DDPLAUNCH_TCP_* reach both sides, and a
// bad value fails the server and the client at construction.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "common/env_names.hpp"
#include "tests/store/raw_client.hpp"
#include "tests/support/scoped_env.hpp"
#include "tests/support/tcp_sockets.hpp"
#include "tests/support/wait_until.hpp"

using namespace ddp::rendezvous;
using namespace ddp::test;

namespace {

struct NoOverrides {
  ScopedEnv idle{ddp::env::kTcpKeepIdle, nullptr};
  ScopedEnv interval{ddp::env::kTcpKeepIntvl, nullptr};
  ScopedEnv count{ddp::env::kTcpKeepCnt, nullptr};
  ScopedEnv user_timeout{ddp::env::kTcpUserTimeout, nullptr};
  ScopedEnv rto_max{ddp::env::kTcpRtoMax, nullptr};
  // 3 s: TCP_USER_TIMEOUT 6000 ms (3 s, the 1 s before a silence the last probe may have come,
  // 2 s for the first packet through after it), probes from 1 s idle, 1 s apart (no jitter),
  // resends once a second.
  ScopedEnv tolerance{ddp::env::kPeerTolerance, "3"};
};

// user_timeout_ms where the kernel caps resends (TCP_RTO_MAX_MS), uncapped_ms where it cannot.
void check_options(const std::vector<TcpSocketInfo>& sockets, int keepidle_s, int user_timeout_ms,
                   int uncapped_ms) {
  for (const auto& s : sockets) {
    INFO("fd " << s.fd << " " << s.local_port << " -> " << s.peer_port);
    CHECK(s.keepalive);
    CHECK(s.keepidle_s == keepidle_s);
    CHECK(s.keepintvl_s == 1);
    CHECK(s.keepcnt == 5);
    if (s.rto_max_ms >= 0) {
      CHECK(s.rto_max_ms == 1000);
      CHECK(s.user_timeout_ms == user_timeout_ms);
    } else {
      CHECK(s.user_timeout_ms == uncapped_ms);
    }
  }
}

}  // namespace

TEST_CASE("store connections carry keepalive and TCP_USER_TIMEOUT on both ends", "[liveness]") {
  const NoOverrides clean;
  StoreServer server(loopback());
  auto store = client(server.port());
  store.set("k", "v");
  store.wait({"k"}, 5s);  // opens a wait connection of its own
  CHECK(store.get("k") == "v");

  const auto client_side = connected_to(server.port());
  CHECK(client_side.size() >= 2);  // the request connection and a wait connection
  check_options(client_side, 1, 6000, 9000);
  // The server tuned them when they negotiated kNative, before its first reply.
  const auto server_side = accepted_on(server.port());
  CHECK(server_side.size() == client_side.size());
  check_options(server_side, 1, 6000, 9000);
}

TEST_CASE("a PyTorch client's connection gets no liveness options, ours once negotiated",
          "[liveness]") {
  // A PyTorch client never reconnects: a close on a network blip would kill its worker, and
  // PyTorch's own server sets neither option (docs/store.md, "Dead peers").
  const NoOverrides clean;
  StoreServer server(loopback());
  Raw raw(server.port());  // a bare SocketConn, as PyTorch's: no options on its end either
  raw.send(req(wire::Command::kPing));
  raw.recv(4);
  REQUIRE(accepted_on(server.port()).size() == 1);
  CHECK_FALSE(accepted_on(server.port()).front().keepalive);
  CHECK(accepted_on(server.port()).front().user_timeout_ms == 0);
  REQUIRE(connected_to(server.port()).size() == 1);
  CHECK_FALSE(connected_to(server.port()).front().keepalive);

  // The same raw connection negotiating kNative (the probe's CHECK) gets them at once.
  raw.send(req(wire::Command::kCheck, {wire::kExtensionProbeKey}));
  REQUIRE(raw.recv_u8() == wire::kCheckReady);
  check_options(accepted_on(server.port()), 1, 6000, 9000);
}

TEST_CASE("the DDPLAUNCH_TCP_ variables reach the client's and the server's ends",
          "[liveness][env]") {
  const NoOverrides clean;
  const ScopedEnv idle(ddp::env::kTcpKeepIdle, "7");
  const ScopedEnv user_timeout(ddp::env::kTcpUserTimeout, "4500");
  StoreServer server(loopback());
  auto store = client(server.port());
  store.set("k", "v");
  REQUIRE(store.check({"k"}));
  REQUIRE(connected_to(server.port()).size() == 1);
  check_options(connected_to(server.port()), 7, 4500, 4500);
  REQUIRE(accepted_on(server.port()).size() == 1);
  check_options(accepted_on(server.port()), 7, 4500, 4500);
}

TEST_CASE("a bad DDPLAUNCH_TCP_ value fails the server and the client at once", "[liveness][env]") {
  const NoOverrides clean;
  StoreServer running(loopback());  // started before the bad value
  const ScopedEnv bad(ddp::env::kTcpUserTimeout, "soon");
  CHECK_THROWS_AS(StoreServer(loopback()), ddp::ConfigError);
  CHECK_THROWS_WITH(StoreServer(loopback()),
                    "DDPLAUNCH_TCP_USER_TIMEOUT='soon': expected an integer >= 0");
  CHECK_THROWS_AS(client(running.port()), ddp::ConfigError);
  CHECK_THROWS_WITH(client(running.port()), Catch::Contains("DDPLAUNCH_TCP_USER_TIMEOUT='soon'"));
}
