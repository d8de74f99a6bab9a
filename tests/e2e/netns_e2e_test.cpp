// Real multi-host runs: three hosts, each a network namespace with its own address on one
// bridge (tests/support/netns.hpp), one ddplaunch agent per host (tests/e2e/cluster_job.hpp)
// running scripts/worker.sh. Unlike the loopback tests, a host's link can be cut, leaving
// its connections half-open. Needs root and `ip`; skips with a message without them.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cluster_job.hpp"
#include "common/error.hpp"
#include "common/socket_io.hpp"
#include "tests/support/netns.hpp"
#include "tests/support/process.hpp"

using namespace std::chrono_literals;
using ddp::Deadline;
using ddp::Fd;
using ddp::SocketConn;
using ddp::test::ClusterJob;
using ddp::test::NetnsCluster;
using ddp::test::NetnsHost;

namespace {

constexpr std::size_t kHosts = 3;
constexpr auto kGuard = 30s;  // hang guard for a whole job; the happy paths take ~1 s
// Each cluster is a network of its own, so fixed ports never collide with other tests.
constexpr std::uint16_t kStorePort = 29500;
constexpr std::uint16_t kTestPort = 7000;
const std::string kWorker = std::string(DDP_SOURCE_DIR) + "/tests/e2e/scripts/worker.sh";
// Short windows: a happy path forms at once; a broken one fails in seconds, not minutes.
const std::string kFastConf =
    "join_timeout=10,last_call_timeout=1,heartbeat_interval=0.2,lease_timeout=1,"
    "exit_barrier_timeout=10";

// A cluster of `hosts`, or nullptr after a warning saying why this machine cannot make one
// (Catch2 v2 has no SKIP: the case returns and passes, with the warning in its output).
std::unique_ptr<NetnsCluster> cluster_or_skip(std::size_t hosts) {
  std::string why_not;
  auto cluster = NetnsCluster::make(hosts, why_not);
  if (!cluster) WARN("SKIPPED: cannot make hosts from network namespaces here: " << why_not);
  return cluster;
}

// What an agent runs beyond its rendezvous flags; the defaults suit a happy path.
struct AgentFlags {
  std::string worker = kWorker;  // a script from tests/e2e/scripts/, or any program
  std::vector<std::string> worker_args;
  int nproc_per_node = 1;
  int max_restarts = 0;
  std::string rdzv_conf = kFastConf;
  std::vector<std::string> extra;  // further ddplaunch flags
};

std::vector<std::string> with_flags(std::vector<std::string> args, const AgentFlags& flags) {
  args.insert(args.end(),
              {"--nproc_per_node", std::to_string(flags.nproc_per_node), "--max_restarts",
               std::to_string(flags.max_restarts), "--rdzv_conf", flags.rdzv_conf});
  args.insert(args.end(), flags.extra.begin(), flags.extra.end());
  args.push_back(flags.worker);
  args.insert(args.end(), flags.worker_args.begin(), flags.worker_args.end());
  return args;
}

// ddplaunch's arguments on host i of a static job on every host of the cluster; node 0 (host
// 0) hosts the store.
std::vector<std::string> static_args(const NetnsCluster& cluster, std::size_t i,
                                     const AgentFlags& flags = {}) {
  const std::string nodes = std::to_string(cluster.size());
  const std::string port = std::to_string(kStorePort);
  return with_flags(
      {"--nnodes", nodes, "--node_rank", std::to_string(i), "--master_addr", cluster.host(0).addr(),
       "--master_port", port, "--local_addr", cluster.host(i).addr()},
      flags);
}

// ddplaunch's arguments on host i of an elastic job (--nnodes = every host) with the store on
// host 0 (its --local_addr is the endpoint's host, so it hosts the store).
std::vector<std::string> elastic_args(const NetnsCluster& cluster, std::size_t i,
                                      const AgentFlags& flags = {}) {
  const std::string nodes = std::to_string(cluster.size());
  const std::string endpoint = cluster.host(0).addr() + ":" + std::to_string(kStorePort);
  return with_flags({"--nnodes", nodes, "--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint,
                     "--rdzv_id", "netns", "--local_addr", cluster.host(i).addr()},
                    flags);
}

// RANK values printed by the workers in one agent's log, for the given WORLD_SIZE.
std::set<int> ranks_in(const std::string& log, int world_size) {
  std::set<int> ranks;
  const std::regex re("WORKER RANK=(\\d+) .*WORLD_SIZE=" + std::to_string(world_size) + " ");
  for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end; ++it) {
    ranks.insert(std::stoi((*it)[1]));
  }
  return ranks;
}

// A TCP listener inside one host, on addr:port.
class Listener {
 public:
  Listener(const NetnsHost& host, const std::string& addr, std::uint16_t port) {
    const auto inside = host.enter();
    fd_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    REQUIRE(fd_);
    const int one = 1;
    ::setsockopt(fd_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    REQUIRE(::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) == 1);
    REQUIRE(::bind(fd_.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0);
    REQUIRE(::listen(fd_.get(), 8) == 0);
  }
  // The next connection and its peer's address; fails the test when none comes in time.
  std::pair<SocketConn, std::string> accept(std::chrono::milliseconds timeout) const {
    REQUIRE(ddp::poll_until(fd_.get(), POLLIN, Deadline::after(timeout)));
    sockaddr_in peer{};
    socklen_t len = sizeof(peer);
    Fd conn(::accept4(fd_.get(), reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC));
    REQUIRE(conn);
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &peer.sin_addr, text, sizeof(text));
    return {SocketConn(std::move(conn)), text};
  }

 private:
  Fd fd_;
};

// A connection opened from inside `from` (it stays there once the scope is left).
SocketConn connect_from(const NetnsHost& from, const std::string& addr, std::uint16_t port,
                        std::chrono::milliseconds timeout) {
  const auto inside = from.enter();
  return SocketConn::connect(addr, port, timeout, "test listener");
}

}  // namespace

TEST_CASE("netns harness: a process on one host reaches another host by its address",
          "[e2e][netns]") {
  const auto cluster = cluster_or_skip(kHosts);
  if (!cluster) return;
  const NetnsHost& h0 = cluster->host(0);
  const NetnsHost& h1 = cluster->host(1);
  const Listener server(h0, "0.0.0.0", kTestPort);
  ddp::test::ChildOptions options;
  options.argv = {
      "/bin/bash", "-c",
      "exec 3<>/dev/tcp/" + h0.addr() + "/" + std::to_string(kTestPort) + " && echo hello >&3"};
  options.merge_stderr = true;
  std::unique_ptr<ddp::test::ChildProcess> child;
  {
    const auto inside = h1.enter();
    child = std::make_unique<ddp::test::ChildProcess>(options);
  }
  const int rc = child->wait(10s);
  INFO(child->out());
  CHECK(rc == 0);
  auto [conn, peer] = server.accept(10s);
  CHECK(peer == h1.addr());  // the child's packets left from host 1's address
  CHECK(conn.recv_exact(6, Deadline::after(10s)) == "hello\n");
}

TEST_CASE("netns harness: every host has a loopback of its own", "[e2e][netns]") {
  const auto cluster = cluster_or_skip(kHosts);
  if (!cluster) return;
  const Listener local(cluster->host(2), "127.0.0.1", kTestPort);
  SocketConn client = connect_from(cluster->host(2), "127.0.0.1", kTestPort, 5s);
  auto [conn, peer] = local.accept(5s);
  client.send_all("x", Deadline::after(5s));
  CHECK(conn.recv_exact(1, Deadline::after(5s)) == "x");
  // Host 1's 127.0.0.1 is another one: nothing listens there.
  CHECK_THROWS_AS(connect_from(cluster->host(1), "127.0.0.1", kTestPort, 200ms), ddp::SocketError);
}

TEST_CASE("netns harness: a cut link stops host 1's traffic, half-open, until it is restored",
          "[e2e][netns]") {
  const auto cluster = cluster_or_skip(kHosts);
  if (!cluster) return;
  const auto end = GENERATE(NetnsCluster::LinkEnd::kHost, NetnsCluster::LinkEnd::kSwitch);
  INFO((end == NetnsCluster::LinkEnd::kHost ? "host end cut" : "switch end cut"));
  const NetnsHost& h0 = cluster->host(0);
  const Listener server(h0, "0.0.0.0", kTestPort);
  SocketConn client = connect_from(cluster->host(1), h0.addr(), kTestPort, 5s);
  auto [conn, peer] = server.accept(5s);
  client.send_all("a", Deadline::after(5s));
  REQUIRE(conn.recv_exact(1, Deadline::after(5s)) == "a");

  cluster->cut_link(1, end);
  // The send is buffered without an error, nothing arrives, and neither side is told.
  client.send_all("b", Deadline::after(1s));
  CHECK_FALSE(ddp::poll_until(conn.fd(), POLLIN, Deadline::after(500ms)));
  CHECK_FALSE(client.readable_now());
  // New connections from host 1 fail: at once when its own end is down (no route), by timing
  // out when the switch drops them. Host 2 still gets through.
  CHECK_THROWS_WITH(connect_from(cluster->host(1), h0.addr(), kTestPort, 300ms),
                    Catch::Contains(end == NetnsCluster::LinkEnd::kHost ? "Network is unreachable"
                                                                        : "timed out"));
  SocketConn other = connect_from(cluster->host(2), h0.addr(), kTestPort, 5s);
  CHECK(server.accept(5s).second == cluster->host(2).addr());

  cluster->restore_link(1);
  // TCP retransmits what was sent meanwhile: the connection carries bytes again both ways.
  CHECK(conn.recv_exact(1, Deadline::after(10s)) == "b");
  conn.send_all("c", Deadline::after(5s));
  CHECK(client.recv_exact(1, Deadline::after(10s)) == "c");
  CHECK_NOTHROW(connect_from(cluster->host(1), h0.addr(), kTestPort, 5s));
}

TEST_CASE("netns e2e static: 3 hosts, ranks follow node_rank, every agent exits 0",
          "[e2e][netns][multinode]") {
  const auto cluster = cluster_or_skip(kHosts);
  if (!cluster) return;
  ClusterJob job(*cluster);
  // Node 2 and 1 first: they wait for node 0's store.
  for (std::size_t i = kHosts; i-- > 0;) job.start(i, static_args(*cluster, i));
  const auto codes = job.wait_all(kGuard);
  INFO(job.logs());
  const std::string master = "MASTER=" + cluster->host(0).addr() + ":" + std::to_string(kStorePort);
  for (std::size_t a = 0; a < job.size(); ++a) {
    const std::size_t node = job.host_of(a);
    CHECK(codes[a] == 0);
    CHECK(ranks_in(job.log(a), static_cast<int>(kHosts)) == std::set<int>{static_cast<int>(node)});
    CHECK_THAT(job.log(a), Catch::Contains("GROUP_RANK=" + std::to_string(node) +
                                           " GROUP_WORLD_SIZE=3 " + master));
  }
}

TEST_CASE("netns e2e elastic: 3 hosts form one group, ranks 0..2, every agent exits 0",
          "[e2e][netns][multinode]") {
  const auto cluster = cluster_or_skip(kHosts);
  if (!cluster) return;
  ClusterJob job(*cluster);
  for (std::size_t i = 0; i < kHosts; ++i) job.start(i, elastic_args(*cluster, i));
  const auto codes = job.wait_all(kGuard);
  INFO(job.logs());
  std::set<int> all;
  for (std::size_t a = 0; a < job.size(); ++a) {
    CHECK(codes[a] == 0);
    const auto ranks = ranks_in(job.log(a), static_cast<int>(kHosts));
    CHECK(ranks.size() == 1);
    all.insert(ranks.begin(), ranks.end());
    CHECK_THAT(job.log(a), Catch::Contains("RESTARTS=0 RUN_ID=netns"));
  }
  CHECK(all == std::set<int>{0, 1, 2});
  // Every agent's exit was seen, and they finished together (a generous bound: the store
  // host leaves its exit barrier once the last node is out).
  const auto spread = job.exit_spread();
  REQUIRE(spread.has_value());
  CHECK(*spread < 5s);
}
