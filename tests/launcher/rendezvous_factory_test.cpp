// The rendezvous factory, table-driven: which rendezvous a command line gets, whether this
// agent hosts the store, the run id and the workers' store, and the combinations refused.
#include "launcher/rendezvous_factory.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "launcher/cli.hpp"
#include "rendezvous/dynamic_rendezvous.hpp"
#include "rendezvous/local_rendezvous.hpp"
#include "rendezvous/static_rendezvous.hpp"

using namespace ddp::launcher;

namespace {

const Environment kEnv = {{"PATH", "/usr/bin:/bin"}, {"CUDA_VISIBLE_DEVICES", ""}};

LaunchConfig parse(std::vector<std::string> args) {
  args.emplace_back("/bin/true");
  auto command_line = parse_command_line(args, kEnv, [] { return 0; });
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
      {{"--nnodes", "1:2", "--rdzv_backend", "etcd-v3", "--rdzv_endpoint", "127.0.0.1:29400"},
       "etcd-v3"},
      {{"--nnodes", "1:2", "--rdzv_backend", "c10d"}, "needs --rdzv_endpoint"},
  };
  for (const auto& row : table) {
    std::string line;
    for (const auto& a : row.args) line += a + " ";
    INFO(line);
    CHECK_THROWS_WITH(make_rendezvous(parse(row.args), kEnv), Catch::Contains(row.says));
  }
}
