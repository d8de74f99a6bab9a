// SLURM hostlist expressions and the defaults ddplaunch takes from a job step.
#include "launcher/hostlist.hpp"

#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "launcher/slurm_env.hpp"

using namespace ddp::launcher;
using Hosts = std::vector<std::string>;

TEST_CASE("hostlist: expansion table", "[hostlist]") {
  struct Row {
    std::string text;
    Hosts hosts;
  };
  const std::vector<Row> table{
      {"node1", {"node1"}},
      {"a,b,c", {"a", "b", "c"}},
      {"gpu[01-04,07],cpu-a[1-2]",
       {"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu-a1", "cpu-a2"}},
      {"n[8-11]", {"n8", "n9", "n10", "n11"}},
      {"n[08-11]", {"n08", "n09", "n10", "n11"}},
      {"n[098-101]", {"n098", "n099", "n100", "n101"}},
      {"n[007]", {"n007"}},
      {"r[1-2]n[1-2]", {"r1n1", "r1n2", "r2n1", "r2n2"}},
      {"n[3]-ib", {"n3-ib"}},
      {"[1-2]", {"1", "2"}},
      {"host-1.example.com,h[2-3].example.com",
       {"host-1.example.com", "h2.example.com", "h3.example.com"}},
      // IPv6 addresses: bracketed ones are addresses, not ranges; bare ones are left alone.
      {"[fd00::1],[fd00::2]", {"fd00::1", "fd00::2"}},
      {"[::1],n[1-2]", {"::1", "n1", "n2"}},
      {"fd00::1,fd00::2", {"fd00::1", "fd00::2"}},
  };
  for (const auto& row : table) {
    INFO(row.text);
    CHECK(expand_hostlist(row.text) == row.hosts);
  }
  CHECK(first_host("gpu[01-04,07],cpu-a[1-2]") == "gpu01");
}

TEST_CASE("hostlist: malformed expressions name the text, position and expectation", "[hostlist]") {
  struct Row {
    std::string text;
    std::string says;
  };
  const std::vector<Row> table{
      {"", "non-empty"},
      {"a,,b", "empty item"},
      {"a,", "after ','"},
      {"n[1-2", "']' closing"},
      {"n1-2]", "'[' before ']'"},
      {"n[]", "a number at position 2"},
      {"n[a-b]", "a number"},
      {"n[5-3]", "upper bound >= 5 (got 3)"},
      {"n[1-]", "upper bound of a range"},
      {"n[1-2;3]", "',', '-' or ']'"},
      {"n[1-99999999]", "more than"},
      {"a[1-1024]b[1-1024]c[1-2]", "more than"},
      {"[fd00::1]x", "',' after the IPv6 address"},
  };
  for (const auto& row : table) {
    INFO(row.text);
    CHECK_THROWS_AS(expand_hostlist(row.text), ddp::ConfigError);
    CHECK_THROWS_WITH(expand_hostlist(row.text),
                      Catch::Contains(row.says) && Catch::Contains("'" + row.text + "'"));
  }
}

namespace {
Environment step_env() {
  return {{"SLURM_JOB_ID", "4242"},
          {"SLURM_STEP_ID", "3"},
          {"SLURM_NNODES", "4"},
          {"SLURM_NODEID", "2"},
          {"SLURM_NTASKS", "4"},
          {"SLURM_JOB_NODELIST", "gpu[01-04,07]"},
          {"SLURM_STEP_NODELIST", "gpu[02-05]"}};
}
}  // namespace

TEST_CASE("slurm: a job step fills what the command line left out", "[slurm]") {
  LaunchConfig config;
  REQUIRE(apply_slurm_defaults(config, step_env()));
  CHECK(config.nnodes == "4");
  CHECK(config.min_nodes == 4);
  CHECK(config.max_nodes == 4);
  CHECK(config.node_rank == 2);
  CHECK(config.master_addr == "gpu02");  // the step's first node, not the allocation's
  CHECK(config.run_id == "4242.3");
  CHECK_FALSE(config.rdzv_endpoint.has_value());
}

TEST_CASE("slurm: explicit flags win", "[slurm]") {
  LaunchConfig config;
  config.nnodes = "2";
  config.min_nodes = config.max_nodes = 2;
  config.node_rank = 1;
  config.master_addr = "10.0.0.9";
  config.run_id = "mine";
  apply_slurm_defaults(config, step_env());
  CHECK(config.nnodes == "2");
  CHECK(config.node_rank == 1);
  CHECK(config.master_addr == "10.0.0.9");
  CHECK(config.run_id == "mine");
}

TEST_CASE("slurm: c10d gets its endpoint from the first node, no node_rank", "[slurm]") {
  LaunchConfig config;
  config.rdzv_backend = "c10d";
  auto env = step_env();
  env.erase("SLURM_STEP_NODELIST");
  apply_slurm_defaults(config, env);
  CHECK(config.rdzv_endpoint == "gpu01:29400");
  CHECK_FALSE(config.node_rank.has_value());
}

TEST_CASE("slurm: an IPv6 first node is bracketed in the endpoint, bare in MASTER_ADDR",
          "[slurm][ipv6]") {
  auto env = step_env();
  env.erase("SLURM_STEP_NODELIST");
  env["SLURM_JOB_NODELIST"] = "[fd00::1],[fd00::2],[fd00::3],[fd00::4]";
  LaunchConfig elastic;
  elastic.rdzv_backend = "c10d";
  apply_slurm_defaults(elastic, env);
  CHECK(elastic.rdzv_endpoint == "[fd00::1]:29400");
  LaunchConfig fixed;
  apply_slurm_defaults(fixed, env);
  CHECK(fixed.master_addr == "fd00::1");
}

TEST_CASE("slurm: a one-node step keeps the store on loopback", "[slurm]") {
  LaunchConfig config;
  auto env = step_env();
  env["SLURM_NNODES"] = "1";
  env["SLURM_NODEID"] = "0";
  env["SLURM_NTASKS"] = "1";
  apply_slurm_defaults(config, env);
  CHECK(config.max_nodes == 1);
  CHECK_FALSE(config.master_addr.has_value());
  CHECK_FALSE(config.node_rank.has_value());
  CHECK(config.run_id == "4242.3");
}

TEST_CASE("slurm: outside a job step nothing changes, bad values are named", "[slurm]") {
  LaunchConfig config;
  auto env = step_env();
  env.erase("SLURM_STEP_ID");  // the batch script itself, or not SLURM at all
  CHECK_FALSE(apply_slurm_defaults(config, env));
  CHECK_FALSE(config.nnodes.has_value());

  env = step_env();
  env["SLURM_NNODES"] = "four";
  CHECK_THROWS_WITH(apply_slurm_defaults(config, env), Catch::Contains("SLURM_NNODES=four"));
  env = step_env();
  env["SLURM_NODEID"] = "4";
  CHECK_THROWS_WITH(apply_slurm_defaults(config, env), Catch::Contains("SLURM_NODEID=4"));
  env = step_env();
  env["SLURM_STEP_NODELIST"] = "gpu[1-";
  CHECK_THROWS_WITH(apply_slurm_defaults(config, env),
                    Catch::Contains("SLURM_STEP_NODELIST") && Catch::Contains("gpu[1-"));
  env = step_env();
  env["SLURM_NTASKS"] = "8";
  CHECK_THROWS_WITH(apply_slurm_defaults(config, env), Catch::Contains("--ntasks-per-node=1"));
}
