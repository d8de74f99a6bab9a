// The rendezvous factory, table-driven: which rendezvous a command line gets, whether this
// agent hosts the store, the run id and the workers' store, and the combinations refused.
#include "launcher/rendezvous_setup/rendezvous_factory.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/host_address.hpp"
#include "launcher/config/cli.hpp"
#include "launcher/rendezvous_setup/etcd_setup.hpp"
#include "rendezvous/dynamic_rendezvous.hpp"
#include "rendezvous/local_rendezvous.hpp"
#include "rendezvous/static_rendezvous.hpp"

using namespace ddp::launcher;

namespace {

const Environment kEnv = {{"PATH", "/usr/bin:/bin"}, {"CUDA_VISIBLE_DEVICES", ""}};

LaunchConfig parse(std::vector<std::string> args) {
  args.emplace_back("/bin/true");
  auto command_line = parse_command_line(args, kEnv, [] { return std::vector<GpuInfo>{}; });
  REQUIRE(command_line.config.has_value());
  return *command_line.config;
}

// A port nobody listens on right now (the kernel picks it): the endpoint needs a real one.
std::string free_port() {
  ddp::rendezvous::StoreServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  ddp::rendezvous::StoreServer probe(o);
  return std::to_string(probe.port());
}

const char* kind_name(const ddp::rendezvous::RendezvousHandler* h) {
  if (dynamic_cast<const ddp::rendezvous::LocalRendezvous*>(h) != nullptr) return "local";
  if (dynamic_cast<const ddp::rendezvous::StaticRendezvous*>(h) != nullptr) return "static";
  if (dynamic_cast<const ddp::rendezvous::DynamicRendezvous*>(h) != nullptr) return "dynamic";
  return "?";
}

}  // namespace

TEST_CASE("rendezvous factory: which rendezvous each command line gets", "[factory]") {
  struct Row {
    std::vector<std::string> args;
    std::string kind;  // local, static, dynamic
    bool hosts_store;
    std::string run_id;  // "" : not checked (random)
  };
  const std::vector<Row> table{
      {{"--nproc_per_node", "2", "--master_port", "0"}, "local", true, "none"},
      {{"--standalone"}, "local", true, ""},  // random run id, port 0
      // torchrun 2.15: one node, no port, no endpoint: standalone (a free port, a random id).
      {{"--nproc_per_node", "2"}, "local", true, ""},
      {{"--nproc_per_node", "2", "--rdzv_id", "job9"}, "local", true, "job9"},
      {{"--master_port", "0", "--rdzv_id", "job7"}, "local", true, "job7"},
      {{"--no_agent_store", "--master_port", "0"}, "local", false, "none"},
      {{"--nnodes", "2", "--node_rank", "0", "--master_addr", "127.0.0.1", "--master_port", "0"},
       "static",
       true,
       "none"},
      {{"--nnodes", "1:2", "--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:" + free_port(),
        "--rdzv_id", "e", "--rdzv_conf", "is_host=true"},
       "dynamic",
       true,
       "e"},
  };
  for (const auto& row : table) {
    std::string line;
    for (const auto& a : row.args) line += a + " ";
    INFO(line);
    const auto setup = make_rendezvous(parse(row.args), kEnv);
    REQUIRE(setup.handler != nullptr);
    CHECK(kind_name(setup.handler.get()) == row.kind);
    CHECK((setup.store_server != nullptr) == row.hosts_store);
    CHECK(setup.workers_use_agent_store == row.hosts_store);
    if (!row.run_id.empty()) CHECK(setup.run_id == row.run_id);
    if (row.run_id.empty()) CHECK(setup.run_id.size() == 16);
  }
}

TEST_CASE("rendezvous factory: combinations it refuses, naming what was expected", "[factory]") {
  struct Row {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Row> table{
      {{"--nnodes", "2:3", "--master_port", "0"}, "needs an elastic rendezvous"},
      {{"--nnodes", "2", "--master_port", "0"}, "needs --node_rank"},
      {{"--nnodes", "2", "--node_rank", "0", "--no_agent_store"}, "single-node only"},
      {{"--nnodes", "1:2", "--rdzv_backend", "zookeeper", "--rdzv_endpoint", "127.0.0.1:29400"},
       "expected static, c10d or etcd-v3"},
      // The etcd backend: refused before any member is dialled.
      {{"--nnodes", "1:2", "--rdzv_backend", "etcd-v3"}, "needs --rdzv_endpoint host:2379"},
      {{"--nnodes", "1:2", "--rdzv_backend", "etcd", "--rdzv_endpoint", "127.0.0.1:1",
        "--no_agent_store"},
       "group-rank-0 agent serves the workers' store"},
      {{"--nnodes", "1:2", "--rdzv_backend", "etcd-v3", "--rdzv_endpoint", "127.0.0.1:1",
        "--rdzv_conf", "cert=/tmp/c.pem"},
       "cert= and key= go together"},
      {{"--nnodes", "1:2", "--rdzv_backend", "etcd-v3", "--rdzv_endpoint", "127.0.0.1:1",
        "--rdzv_conf", "password_file=/tmp/p"},
       "password_file= needs user="},
      {{"--nnodes", "1:2", "--rdzv_backend", "etcd-v3", "--rdzv_endpoint", "127.0.0.1:1",
        "--rdzv_conf", "user=root,password_file=/nonexistent/pw"},
       "/nonexistent/pw"},
      {{"--nnodes", "1:2", "--rdzv_backend", "etcd-v3", "--rdzv_endpoint", "127.0.0.1:99999"},
       "127.0.0.1:99999"},
      {{"--nnodes", "1:2", "--rdzv_backend", "etcd-v3", "--rdzv_endpoint", "ftp://x:1"},
       "ftp://x:1"},
      {{"--nnodes", "1:2", "--rdzv_backend", "etcd-v3", "--rdzv_endpoint", " , "},
       "expected the etcd members"},
      {{"--nnodes", "1:2", "--rdzv_backend", "c10d"}, "needs --rdzv_endpoint"},
  };
  for (const auto& row : table) {
    std::string line;
    for (const auto& a : row.args) line += a + " ";
    INFO(line);
    CHECK_THROWS_WITH(make_rendezvous(parse(row.args), kEnv), Catch::Contains(row.says));
  }
}

TEST_CASE("rendezvous factory: etcd members from --rdzv_endpoint", "[factory][etcd]") {
  using V = std::vector<std::string>;
  CHECK(etcd_endpoints("10.0.0.1", false) == V{"10.0.0.1:2379"});
  CHECK(etcd_endpoints("a:1, b ,[::1]:3,::1", false) ==
        V{"a:1", "b:2379", "[::1]:3", "[::1]:2379"});
  CHECK(etcd_endpoints("a:1,http://b:2,https://c:3", false) ==
        V{"a:1", "http://b:2", "https://c:3"});
  // protocol=https: bare members speak TLS; explicit http:// stays plain.
  CHECK(etcd_endpoints("a:1,http://b:2", true) == V{"https://a:1", "http://b:2"});
  CHECK(is_etcd_backend("etcd-v3"));
  CHECK(is_etcd_backend("etcd"));
  CHECK(is_etcd_backend("etcd-v2"));
  CHECK_FALSE(is_etcd_backend("c10d"));
}

namespace {

// An IPv4 address of one of this machine's interfaces other than loopback; "" when none.
std::string non_loopback_ipv4() {
  ifaddrs* addrs = nullptr;
  if (::getifaddrs(&addrs) != 0) return "";
  std::string found;
  for (ifaddrs* a = addrs; a != nullptr && found.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    sockaddr_in in{};
    std::memcpy(&in, a->ifa_addr, sizeof(in));
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &in.sin_addr, text, sizeof(text));
    if (!ddp::is_loopback_host(text)) found = text;
  }
  ::freeifaddrs(addrs);
  return found;
}

// True when a TCP connection to host:port is accepted (a listener is there).
bool reachable(const std::string& host, uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(port);
  ::inet_pton(AF_INET, host.c_str(), &in.sin_addr);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&in), sizeof(in)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

TEST_CASE("rendezvous factory: a single-node store listens on loopback only", "[factory][bind]") {
  SECTION("by default, on 127.0.0.1, and workers dial 127.0.0.1") {
    auto setup = make_rendezvous(parse({"--standalone"}), kEnv);
    CHECK(setup.store_server->address() ==
          "127.0.0.1:" + std::to_string(setup.store_server->port()));
    CHECK(setup.handler->next_rendezvous().master_addr == "127.0.0.1");
  }
  SECTION("--master_addr ::1: on ::1") {
    auto setup = make_rendezvous(parse({"--master_addr", "[::1]", "--master_port", "0"}), kEnv);
    CHECK(setup.store_server->address() == "[::1]:" + std::to_string(setup.store_server->port()));
    CHECK(setup.handler->next_rendezvous().master_addr == "::1");
  }
  const std::string lan = non_loopback_ipv4();
  if (lan.empty()) {
    WARN("no non-loopback IPv4 interface here: the --master_addr LAN cases are skipped");
    return;
  }
  SECTION("--master_addr of this machine's LAN address: still loopback, and MASTER_ADDR too") {
    auto setup = make_rendezvous(parse({"--master_addr", lan, "--master_port", "0"}), kEnv);
    const uint16_t port = setup.store_server->port();
    INFO(lan << " " << setup.store_server->address());
    CHECK(setup.store_server->address() == "127.0.0.1:" + std::to_string(port));
    CHECK(setup.handler->next_rendezvous().master_addr == "127.0.0.1");
    CHECK(reachable("127.0.0.1", port));
    CHECK_FALSE(reachable(lan, port));  // not reachable from the network
  }
  SECTION("--store_bind 0.0.0.0 asks for every IPv4 interface; MASTER_ADDR stays as given") {
    auto setup = make_rendezvous(
        parse({"--master_addr", lan, "--master_port", "0", "--store_bind", "0.0.0.0"}), kEnv);
    const uint16_t port = setup.store_server->port();
    CHECK(setup.store_server->address() == "0.0.0.0:" + std::to_string(port) + " (IPv4 only)");
    CHECK(setup.handler->next_rendezvous().master_addr == lan);
    CHECK(reachable(lan, port));
  }
}

TEST_CASE("rendezvous factory: a multi-node store listens on the address the nodes dial",
          "[factory][bind]") {
  const std::string lan = non_loopback_ipv4();
  if (lan.empty()) {
    WARN("no non-loopback IPv4 interface here: skipped");
    return;
  }
  SECTION("static: --master_addr of this machine") {
    auto setup = make_rendezvous(
        parse({"--nnodes", "2", "--node_rank", "0", "--master_addr", lan, "--master_port", "0"}),
        kEnv);
    const uint16_t port = setup.store_server->port();
    CHECK(setup.store_server->address() == lan + ":" + std::to_string(port));
    CHECK(reachable(lan, port));
    CHECK_FALSE(reachable("127.0.0.1", port));  // nor on any other interface
  }
  SECTION("dynamic: the endpoint's host, found by --local_addr") {
    auto setup =
        make_rendezvous(parse({"--nnodes", "1:2", "--rdzv_backend", "c10d", "--rdzv_endpoint",
                               lan + ":" + free_port(), "--rdzv_id", "b", "--local_addr", lan}),
                        kEnv);
    REQUIRE(setup.store_server != nullptr);
    const uint16_t port = setup.store_server->port();
    CHECK(setup.store_server->address() == lan + ":" + std::to_string(port));
    CHECK_FALSE(reachable("127.0.0.1", port));
  }
  SECTION("--store_bind 0.0.0.0: every IPv4 interface, as asked") {
    auto setup = make_rendezvous(parse({"--nnodes", "2", "--node_rank", "0", "--master_addr", lan,
                                        "--master_port", "0", "--store_bind", "0.0.0.0"}),
                                 kEnv);
    const uint16_t port = setup.store_server->port();
    CHECK(reachable(lan, port));
    CHECK(reachable("127.0.0.1", port));
  }
}

TEST_CASE("store_listen_host: a host that is not this machine's falls back to every interface",
          "[factory][bind]") {
  std::string why;
  CHECK(ddp::store_listen_host("localhost", "", why) == "127.0.0.1");
  CHECK(why.empty());
  CHECK(ddp::store_listen_host("127.0.0.5", "", why) == "127.0.0.5");
  CHECK(ddp::store_listen_host("192.0.2.200", "", why) == ddp::kAnyHost);  // TEST-NET-1
  CHECK_THAT(why, Catch::Contains("192.0.2.200") && Catch::Contains("not an address"));
  const std::string lan = non_loopback_ipv4();
  if (!lan.empty()) {
    // The endpoint is a name other nodes resolve; --local_addr says which address is ours.
    CHECK(ddp::store_listen_host("no-such-host.invalid", lan, why) == lan);
    CHECK(why.empty());
  }
}
