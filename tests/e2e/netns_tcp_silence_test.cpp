// Silence on a TCP connection with the peer tolerance's options (common/tcp_liveness.hpp),
// across a real cut: two network-namespace hosts behind a switch (tests/support/netns.hpp),
// host 1's switch port taken down, so every packet vanishes both ways. A silence shorter than
// the tolerance T leaves the connection up whether it was idle (keepalive) or carrying data
// (resends); one that lasts on drops it. The timings are chosen so that the plain options
// (TCP_USER_TIMEOUT = T counted from the last packet received, resends doubling) lose the
// connection in both short cases every time: the idle one last heard its peer 0.9 s before the
// cut, the busy one sends at the cut and the link comes back just before the third second.
// Needs root and `ip`; skips with a message without.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "common/fd.hpp"
#include "common/socket_io.hpp"
#include "common/tcp_liveness.hpp"
#include "tests/support/netns.hpp"
#include "tests/support/scoped_env.hpp"

using namespace std::chrono_literals;
using ddp::Fd;
using ddp::SocketConn;
using ddp::test::NetnsCluster;
using ddp::test::ScopedEnv;

namespace {

constexpr uint16_t kPort = 29531;

// One TCP connection from host 1 to host 0, both ends with the options of a 3 s tolerance.
struct CutConnection {
  explicit CutConnection(const NetnsCluster& cluster) {
    const ScopedEnv tolerance(ddp::env::kPeerTolerance, "3");
    Fd listener;
    {
      const auto inside = cluster.host(0).enter();
      listener.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      REQUIRE(listener);
      const int on = 1;
      ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_port = htons(kPort);
      address.sin_addr.s_addr = htonl(INADDR_ANY);
      REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
      REQUIRE(::listen(listener.get(), 1) == 0);
    }
    {
      const auto inside = cluster.host(1).enter();
      client = SocketConn::connect(cluster.host(0).addr(), kPort, 5s);
    }
    server = SocketConn(Fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC)));
    REQUIRE(server.is_open());
    REQUIRE(ddp::set_tcp_liveness(client.fd(), ddp::tcp_liveness_from_env()));
    REQUIRE(ddp::set_tcp_liveness(server.fd(), ddp::tcp_liveness_from_env()));
    // A first exchange, so each end has a measured round trip (resends from 200 ms on).
    for (int i = 0; i < 3; ++i) exchange();
  }

  // One byte each way; the connection's error if either fails.
  void exchange() {
    client.send_all("c", ddp::Deadline::after(5s));
    CHECK(server.recv_exact(1, ddp::Deadline::after(5s)) == "c");
    server.send_all("s", ddp::Deadline::after(5s));
    CHECK(client.recv_exact(1, ddp::Deadline::after(5s)) == "s");
  }

  // True when fd's connection is still established and nothing (an end of stream, a reset, a
  // stray byte) waits to be read. Not SO_ERROR: it also reports the soft errors a cut leaves
  // behind (an unanswered neighbour lookup), which TCP itself rode out.
  static bool alive(int fd) {
    tcp_info info{};
    socklen_t length = sizeof(info);
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) return false;
    if (info.tcpi_state != TCP_ESTABLISHED) return false;
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;
  }

  SocketConn client;
  SocketConn server;
};

std::unique_ptr<NetnsCluster> cluster_or_skip() {
  std::string why_not;
  auto cluster = NetnsCluster::make(2, why_not);
  if (!cluster) WARN("SKIPPED: cannot make hosts from network namespaces here: " << why_not);
  return cluster;
}

}  // namespace

TEST_CASE("netns tcp: an idle connection rides out a silence just shorter than the tolerance",
          "[e2e][netns][tcp_silence]") {
  const auto cluster = cluster_or_skip();
  if (!cluster) return;
  CutConnection connection(*cluster);
  // Last heard 0.9 s before the cut (the first probe is due 0.1 s into it), silent for 2.9 s
  // of the 3 s tolerance: 3.8 s since either end last heard the other when the link is back.
  std::this_thread::sleep_for(900ms);
  cluster->cut_link(1, NetnsCluster::LinkEnd::kSwitch);
  std::this_thread::sleep_for(2900ms);
  cluster->restore_link(1);
  std::this_thread::sleep_for(1500ms);  // the next probe of each end is answered
  CHECK(CutConnection::alive(connection.client.fd()));
  CHECK(CutConnection::alive(connection.server.fd()));
  connection.exchange();
}

TEST_CASE(
    "netns tcp: a connection sending into a silence just shorter than the tolerance "
    "delivers once the link is back",
    "[e2e][netns][tcp_silence]") {
  const auto cluster = cluster_or_skip();
  if (!cluster) return;
  CutConnection connection(*cluster);
  cluster->cut_link(1, NetnsCluster::LinkEnd::kSwitch);
  const auto cut = std::chrono::steady_clock::now();
  connection.client.send_all("x", ddp::Deadline::after(1s));  // resent into the silence
  std::this_thread::sleep_until(cut + 2900ms);
  cluster->restore_link(1);
  std::string got;
  try {
    got = connection.server.recv_exact(1, ddp::Deadline::after(5s));
  } catch (const ddp::SocketError& e) {
    FAIL("the byte sent into the silence was lost: " << e.what());
  }
  CHECK(got == "x");
  CHECK(CutConnection::alive(connection.client.fd()));
  connection.exchange();
}

TEST_CASE("netns tcp: a silence that lasts drops the connection, a silence not a death",
          "[e2e][netns][tcp_silence]") {
  const auto cluster = cluster_or_skip();
  if (!cluster) return;
  CutConnection connection(*cluster);
  cluster->cut_link(1, NetnsCluster::LinkEnd::kSwitch);
  // The client waits for a reply that never comes: its end gives up once the silence lasted
  // the tolerance and the allowance (about 5 s here); the 20 s deadline is only a guard.
  ddp::PeerLoss loss = ddp::PeerLoss::kUnknown;
  std::string what;
  try {
    connection.client.send_all("?", ddp::Deadline::after(1s));
    connection.client.recv_exact(1, ddp::Deadline::after(20s));
  } catch (const ddp::SocketTimeout& e) {
    FAIL("still not dropped after 20 s: " << e.what());
  } catch (const ddp::SocketError& e) {
    loss = e.loss();
    what = e.what();
  }
  INFO(what);
  CHECK(loss == ddp::PeerLoss::kSilence);
  cluster->restore_link(1);
}
