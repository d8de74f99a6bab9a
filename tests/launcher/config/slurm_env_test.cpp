// The defaults ddplaunch takes from a SLURM job step (tables, no SLURM).
#include "launcher/config/slurm_env.hpp"

#include <catch2/catch.hpp>

#include "common/error.hpp"

using namespace ddp::launcher;

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
  CHECK_THROWS_WITH(apply_slurm_defaults(config, env),
                    Catch::Contains("SLURM_NNODES='four': expected an integer >= 1"));
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
