#include "worker_runtime/env_contract.hpp"

#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "worker_runtime/dist_context.hpp"

using namespace ddp::worker_runtime;
using Catch::Matchers::Contains;

namespace {

EnvMap good_env() {
  return {{"RANK", "3"},
          {"LOCAL_RANK", "1"},
          {"WORLD_SIZE", "4"},
          {"LOCAL_WORLD_SIZE", "2"},
          {"MASTER_ADDR", "10.0.0.5"},
          {"MASTER_PORT", "29511"},
          {"TORCHELASTIC_RESTART_COUNT", "2"}};
}

}  // namespace

TEST_CASE("parse_env reads the torchrun contract", "[env]") {
  const EnvContract c = parse_env(good_env());
  CHECK(c.rank == 3);
  CHECK(c.local_rank == 1);
  CHECK(c.world_size == 4);
  CHECK(c.local_world_size == 2);
  CHECK(c.master_addr == "10.0.0.5");
  CHECK(c.master_port == 29511);
  CHECK(c.restart_count == 2);
  CHECK(c.store_prefix == "/worker/attempt_2");
  CHECK(c.source == EnvSource::kTorchrun);
  CHECK_FALSE(c.use_agent_store);
}

TEST_CASE("parse_env honours agent store, error file, backend and prefix overrides", "[env]") {
  EnvMap env = good_env();
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  env["TORCHELASTIC_ERROR_FILE"] = "/tmp/err.json";
  env["DDPLAUNCH_BACKEND"] = "gloo";
  env["DDPLAUNCH_STORE_PREFIX"] = "/custom";
  const EnvContract c = parse_env(env);
  CHECK(c.use_agent_store);
  CHECK(c.error_file == "/tmp/err.json");
  CHECK(c.backend == "gloo");
  CHECK(c.store_prefix == "/custom");
}

TEST_CASE("parse_env names the missing variable", "[env]") {
  for (const char* name : {"WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) {
    EnvMap env = good_env();
    env.erase(name);
    CHECK_THROWS_WITH(parse_env(env), Contains(name) && Contains("not set"));
  }
  CHECK_THROWS_WITH(parse_env({}), Contains("RANK is not set") && Contains("SLURM_PROCID"));
}

TEST_CASE("parse_env rejects malformed values, naming variable and value", "[env]") {
  struct Case {
    const char* name;
    const char* value;
    const char* expect;
  };
  const Case cases[] = {
      {"RANK", "abc", "RANK='abc': expected an integer >= 0"},
      {"RANK", "4", "RANK=4 must be less than WORLD_SIZE=4"},
      {"RANK", "-1", "RANK='-1': expected an integer >= 0"},
      {"RANK", "1x", "RANK='1x': expected an integer >= 0"},
      {"RANK", "99999999999", "RANK='99999999999': expected an integer in [0, 2147483647]"},
      {"WORLD_SIZE", "0", "WORLD_SIZE='0': expected an integer >= 1"},
      {"MASTER_PORT", "70000", "MASTER_PORT='70000': expected an integer in [1, 65535]"},
      {"MASTER_PORT", "0", "MASTER_PORT='0': expected an integer in [1, 65535]"},
      {"MASTER_PORT", "", "MASTER_PORT='': expected an integer in [1, 65535]"},
      {"LOCAL_RANK", "2", "LOCAL_RANK=2 must be less than LOCAL_WORLD_SIZE=2"},
      {"LOCAL_WORLD_SIZE", "5", "LOCAL_WORLD_SIZE=5 exceeds WORLD_SIZE=4"},
      {"TORCHELASTIC_RESTART_COUNT", "-3",
       "TORCHELASTIC_RESTART_COUNT='-3': expected an integer >= 0"},
      {"MASTER_ADDR", "", "MASTER_ADDR is empty"},
      {"MASTER_ADDR", "[]", "MASTER_ADDR='[]' names no host"},
  };
  for (const auto& c : cases) {
    EnvMap env = good_env();
    env[c.name] = c.value;
    INFO(c.name << "=" << c.value);
    CHECK_THROWS_AS(parse_env(env), ddp::ConfigError);
    CHECK_THROWS_WITH(parse_env(env), Contains(c.expect));
  }
}

TEST_CASE("a single process needs no master address", "[env]") {
  const EnvContract c = parse_env({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  CHECK(c.world_size == 1);
  CHECK(c.local_rank == 0);
  CHECK(c.local_world_size == 1);
}

TEST_CASE("parse_env falls back to SLURM under a bare srun", "[env][slurm]") {
  const EnvMap env = {{"SLURM_PROCID", "5"},
                      {"SLURM_LOCALID", "1"},
                      {"SLURM_NTASKS", "8"},
                      {"SLURM_NNODES", "4"},
                      {"SLURM_JOB_NODELIST", "gpu[07-10],login1"},
                      {"MASTER_PORT", "29600"}};
  const EnvContract c = parse_env(env);
  CHECK(c.source == EnvSource::kSlurm);
  CHECK(c.rank == 5);
  CHECK(c.local_rank == 1);
  CHECK(c.world_size == 8);
  CHECK(c.local_world_size == 2);
  CHECK(c.master_addr == "gpu07");
  CHECK(c.master_port == 29600);

  EnvMap with_addr = env;
  with_addr["MASTER_ADDR"] = "head";
  CHECK(parse_env(with_addr).master_addr == "head");  // an explicit MASTER_ADDR wins

  EnvMap bad = env;
  bad["SLURM_PROCID"] = "8";
  CHECK_THROWS_WITH(parse_env(bad), Contains("SLURM_PROCID=8 must be less than SLURM_NTASKS=8"));
  bad = env;
  bad.erase("SLURM_JOB_NODELIST");
  CHECK_THROWS_WITH(parse_env(bad), Contains("SLURM_JOB_NODELIST"));
  bad = env;
  bad.erase("SLURM_LOCALID");
  CHECK_THROWS_WITH(parse_env(bad), Contains("SLURM_LOCALID is not set"));
}

TEST_CASE("RANK wins over SLURM variables (ddplaunch inside srun)", "[env][slurm]") {
  EnvMap env = good_env();
  env["SLURM_PROCID"] = "0";
  env["SLURM_NTASKS"] = "1";
  CHECK(parse_env(env).rank == 3);
  CHECK(parse_env(env).source == EnvSource::kTorchrun);
}

TEST_CASE("first_slurm_host takes the first host of a hostlist", "[env][slurm]") {
  CHECK(first_slurm_host("node01") == "node01");
  CHECK(first_slurm_host("node01,node02") == "node01");
  CHECK(first_slurm_host("node[01-04],x") == "node01");
  CHECK(first_slurm_host("node[7,9-12]") == "node7");
  CHECK(first_slurm_host("rack[3-4]-gpu,b") == "rack3-gpu");
  CHECK(first_slurm_host("[1-2]") == "1");  // numeric host names, as the launcher reads them
  CHECK_THROWS_WITH(first_slurm_host("node[01-04"),
                    Contains("SLURM_JOB_NODELIST") && Contains("']' closing this '['"));
  CHECK_THROWS_WITH(first_slurm_host("node[x]"), Contains("'node[x]'") && Contains("a number"));
  CHECK_THROWS_AS(first_slurm_host(""), ddp::ConfigError);
}

// The worker runtime reads SLURM's hostlists with the launcher's grammar (common/hostlist),
// so a node name with several ranges works under a bare srun too.
TEST_CASE("first_slurm_host accepts several ranges in one name", "[env][slurm]") {
  CHECK(first_slurm_host("r[1-2]n[1-2]") == "r1n1");
  CHECK(first_slurm_host("r[08-09]n[3-4],login1") == "r08n3");
  const EnvMap env = {{"SLURM_PROCID", "0"},
                      {"SLURM_LOCALID", "0"},
                      {"SLURM_NTASKS", "4"},
                      {"SLURM_NNODES", "4"},
                      {"SLURM_JOB_NODELIST", "r[1-2]n[1-2]"},
                      {"MASTER_PORT", "29600"}};
  CHECK(parse_env(env).master_addr == "r1n1");
}

TEST_CASE("IPv6: MASTER_ADDR comes bare, and a bracketed first SLURM host is an address",
          "[env][ipv6]") {
  for (const char* addr : {"::1", "[::1]"}) {
    EnvMap env = good_env();
    env["MASTER_ADDR"] = addr;
    INFO(addr);
    CHECK(parse_env(env).master_addr == "::1");  // what getaddrinfo and Gloo accept
  }
  CHECK(first_slurm_host("[fd00::1],[fd00::2]") == "fd00::1");
  CHECK(first_slurm_host("fd00::1,fd00::2") == "fd00::1");
  CHECK(first_slurm_host("[::1]") == "::1");
}

TEST_CASE("backend choice: auto, overrides and NCCL without a GPU", "[env]") {
  CHECK(resolve_backend("gloo", "") == "gloo");
  CHECK(resolve_backend("nccl", "gloo") == "gloo");  // DDPLAUNCH_BACKEND wins
  CHECK_THROWS_WITH(resolve_backend("mpi", ""), Contains("'mpi' is not a backend"));
  CHECK_THROWS_WITH(resolve_backend("auto", "tpu"),
                    Contains("DDPLAUNCH_BACKEND='tpu' is not a backend"));
  if (cuda_device_count() == 0) {
    CHECK(resolve_backend("auto", "") == "gloo");
    CHECK_THROWS_WITH(resolve_backend("gloo", "nccl"),
                      Contains("DDPLAUNCH_BACKEND=nccl") && Contains("use gloo"));
  } else {
    CHECK(resolve_backend("auto", "") == "nccl");
  }
}

#ifdef DDP_HAVE_CUDA
TEST_CASE("backend choice: auto takes NCCL only with a GPU per local rank", "[env]") {
  CHECK(resolve_backend("auto", "", 2, 2) == "nccl");
  CHECK(resolve_backend("auto", "", 8, 8) == "nccl");
  CHECK(resolve_backend("auto", "", 2, 1) == "gloo");  // two ranks on one GPU: not NCCL
  CHECK(resolve_backend("auto", "", 1, 0) == "gloo");
  CHECK_THROWS_WITH(resolve_backend("nccl", "", 2, 1),
                    Contains("LOCAL_WORLD_SIZE=2") && Contains("1 GPU(s) are visible"));
}
#endif
