// The worker's argv and env contract, field by field.
#include "launcher/process/worker_command.hpp"

#include <catch2/catch.hpp>
#include <csignal>
#include <map>

using namespace ddp::launcher;

namespace {

std::map<std::string, std::string> as_map(const std::vector<std::string>& env) {
  std::map<std::string, std::string> result;
  for (const auto& entry : env) {
    auto eq = entry.find('=');
    result[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return result;
}

}  // namespace

TEST_CASE("the env contract of docs/env.md for a worker", "[env]") {
  LaunchConfig config;
  config.nproc_per_node = 4;
  config.max_restarts = 3;
  config.role = "trainer";
  AttemptInfo attempt;
  attempt.rendezvous.group_rank = 1;
  attempt.rendezvous.group_world_size = 2;
  attempt.rendezvous.rank_offset = 4;
  attempt.rendezvous.world_size = 8;
  attempt.rendezvous.master_addr = "10.0.0.1";
  attempt.rendezvous.master_port = 29555;
  attempt.restart_count = 2;
  attempt.run_id = "job";
  attempt.use_agent_store = true;
  Environment env = {{"PATH", "/bin"}, {"KEEP", "me"}, {"RANK", "stale"}};
  auto worker = as_map(build_worker_env(config, env, attempt, 3, "/tmp/e.json"));
  CHECK(worker["RANK"] == "7");
  CHECK(worker["LOCAL_RANK"] == "3");
  CHECK(worker["WORLD_SIZE"] == "8");
  CHECK(worker["LOCAL_WORLD_SIZE"] == "4");
  CHECK(worker["GROUP_RANK"] == "1");
  CHECK(worker["GROUP_WORLD_SIZE"] == "2");
  CHECK(worker["ROLE_NAME"] == "trainer");
  CHECK(worker["ROLE_RANK"] == "7");
  CHECK(worker["ROLE_WORLD_SIZE"] == "8");
  CHECK(worker["MASTER_ADDR"] == "10.0.0.1");
  CHECK(worker["MASTER_PORT"] == "29555");
  CHECK(worker["TORCHELASTIC_RESTART_COUNT"] == "2");
  CHECK(worker["TORCHELASTIC_MAX_RESTARTS"] == "3");
  CHECK(worker["TORCHELASTIC_RUN_ID"] == "job");
  CHECK(worker["TORCHELASTIC_USE_AGENT_STORE"] == "True");
  CHECK(worker["TORCHELASTIC_ERROR_FILE"] == "/tmp/e.json");
  CHECK(worker["OMP_NUM_THREADS"] == "1");
  CHECK(worker["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1");
  CHECK(worker["NCCL_ASYNC_ERROR_HANDLING"] == "1");
  CHECK(worker["KEEP"] == "me");
  CHECK(worker["TORCHELASTIC_SIGNALS_TO_HANDLE"] ==
        "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2");
}

TEST_CASE("a kept worker's round notice says what a fresh worker's env says", "[env][notice]") {
  LaunchConfig config;
  config.nproc_per_node = 2;
  AttemptInfo attempt;
  attempt.rendezvous.group_rank = 2;
  attempt.rendezvous.group_world_size = 3;
  attempt.rendezvous.rank_offset = 4;
  attempt.rendezvous.world_size = 6;
  attempt.rendezvous.master_addr = "fd00::1";
  attempt.rendezvous.master_port = 29401;
  attempt.restart_count = 5;
  for (const bool virtual_local_rank : {false, true}) {
    config.virtual_local_rank = virtual_local_rank;
    const Environment env = {{"PATH", "/bin"}, {"CUDA_VISIBLE_DEVICES", "0,1"}};
    auto worker = as_map(build_worker_env(config, env, attempt, 1, "/tmp/e.json"));
    const auto notice = round_notice(worker_identity(config, attempt, 1), 5);
    CHECK(notice.round == 5);
    CHECK(std::to_string(notice.rank) == worker["RANK"]);
    CHECK(std::to_string(notice.world_size) == worker["WORLD_SIZE"]);
    CHECK(std::to_string(notice.group_rank) == worker["GROUP_RANK"]);
    CHECK(std::to_string(notice.group_world_size) == worker["GROUP_WORLD_SIZE"]);
    CHECK(std::to_string(notice.local_world_size) == worker["LOCAL_WORLD_SIZE"]);
    CHECK(std::to_string(notice.role_rank) == worker["ROLE_RANK"]);
    CHECK(std::to_string(notice.role_world_size) == worker["ROLE_WORLD_SIZE"]);
    CHECK(notice.master_addr == worker["MASTER_ADDR"]);
    CHECK(std::to_string(notice.master_port) == worker["MASTER_PORT"]);
    CHECK(std::to_string(notice.restart_count) == worker["TORCHELASTIC_RESTART_COUNT"]);
    CHECK(notice.rank == 5);
    CHECK(notice.master_addr == "fd00::1");
  }
}

TEST_CASE("a spare's worker starts without its place, and a member's never inherits the mark",
          "[env][spare]") {
  LaunchConfig config;
  config.nproc_per_node = 2;
  AttemptInfo attempt;
  attempt.run_id = "job";
  attempt.spare = true;
  // Stale values from the agent's own environment (an srun step, say) must not leak through.
  const Environment env = {{"PATH", "/bin"}, {"RANK", "3"}, {"MASTER_ADDR", "old"}};
  auto worker = as_map(build_worker_env(config, env, attempt, 1, "/tmp/e.json"));
  CHECK(worker["DDPLAUNCH_SPARE"] == "1");
  for (const char* name :
       {"RANK", "WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE",
        "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT"}) {
    INFO(name);
    CHECK(worker.count(name) == 0);
  }
  // What the node knows before admission is there.
  CHECK(worker["LOCAL_RANK"] == "1");
  CHECK(worker["LOCAL_WORLD_SIZE"] == "2");
  CHECK(worker["TORCHELASTIC_RUN_ID"] == "job");
  CHECK(worker["TORCHELASTIC_ERROR_FILE"] == "/tmp/e.json");

  attempt.spare = false;
  const Environment marked = {{"PATH", "/bin"}, {"DDPLAUNCH_SPARE", "1"}};
  auto member = as_map(build_worker_env(config, marked, attempt, 1, "/tmp/e.json"));
  CHECK(member.count("DDPLAUNCH_SPARE") == 0);
  CHECK(member["RANK"] == "1");
}

TEST_CASE("virtual_local_rank: LOCAL_RANK 0 and only the worker's own GPU visible", "[env]") {
  LaunchConfig config;
  config.nproc_per_node = 2;
  config.virtual_local_rank = true;
  config.signals_to_handle = {SIGTERM};
  AttemptInfo attempt;
  attempt.rendezvous.rank_offset = 2;
  attempt.rendezvous.world_size = 4;
  Environment env = {{"CUDA_VISIBLE_DEVICES", "4,GPU-abc"}};
  auto first = as_map(build_worker_env(config, env, attempt, 0, "e"));
  auto second = as_map(build_worker_env(config, env, attempt, 1, "e"));
  CHECK(first["LOCAL_RANK"] == "0");
  CHECK(second["LOCAL_RANK"] == "0");
  CHECK(first["RANK"] == "2");
  CHECK(second["RANK"] == "3");
  CHECK(first["CUDA_VISIBLE_DEVICES"] == "4");
  CHECK(second["CUDA_VISIBLE_DEVICES"] == "GPU-abc");
  CHECK(second["TORCHELASTIC_SIGNALS_TO_HANDLE"] == "SIGTERM");
  // Unset: the local rank's own index.
  CHECK(as_map(build_worker_env(config, {}, attempt, 1, "e"))["CUDA_VISIBLE_DEVICES"] == "1");
  // Without the flag CUDA_VISIBLE_DEVICES is the agent's, untouched.
  config.virtual_local_rank = false;
  auto plain = as_map(build_worker_env(config, env, attempt, 1, "e"));
  CHECK(plain["LOCAL_RANK"] == "1");
  CHECK(plain["CUDA_VISIBLE_DEVICES"] == "4,GPU-abc");
}

TEST_CASE("user settings of OMP_NUM_THREADS and NCCL error handling are kept", "[env]") {
  LaunchConfig config;
  config.nproc_per_node = 2;
  Environment env = {{"OMP_NUM_THREADS", "8"}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}};
  auto worker = as_map(build_worker_env(config, env, AttemptInfo{}, 0, "e"));
  CHECK(worker["OMP_NUM_THREADS"] == "8");
  CHECK(worker["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "0");
  CHECK_FALSE(sets_default_omp_threads(config, env));
  config.nproc_per_node = 1;
  CHECK_FALSE(sets_default_omp_threads(config, {}));
  CHECK(as_map(build_worker_env(config, {}, AttemptInfo{}, 0, "e")).count("OMP_NUM_THREADS") == 0);
}

TEST_CASE("argv: python scripts, modules, executables, ${local_rank}, --local_rank", "[env]") {
  Environment env = {{"PATH", "/usr/bin:/bin"}};
  LaunchConfig config;
  config.python_exec = "/usr/bin/python3";
  config.program = "train.py";
  config.program_args = {"--out=run_${local_rank}.log"};
  CHECK(build_worker_argv(config, env, 1) ==
        std::vector<std::string>{"/usr/bin/python3", "-u", "train.py", "--out=run_1.log"});
  config.pass_local_rank_arg = "local_rank";
  CHECK(build_worker_argv(config, env, 2) == std::vector<std::string>{"/usr/bin/python3", "-u",
                                                                      "train.py", "--local_rank=2",
                                                                      "--out=run_2.log"});
  config.pass_local_rank_arg.reset();
  config.module = true;
  config.program = "pkg.train";
  CHECK(build_worker_argv(config, env, 0)[2] == "-m");
  LaunchConfig plain;
  plain.program = "echo";
  plain.program_args = {"${local_rank}"};
  auto argv = build_worker_argv(plain, env, 3);
  CHECK(argv.back() == "3");
  CHECK(argv.front().ends_with("/echo"));
  plain.no_python = true;
  plain.program = "/bin/true";
  CHECK(build_worker_argv(plain, env, 0).front() == "/bin/true");
}

TEST_CASE("argv: --run_path runs the script with runpy.run_path, as torchrun does", "[env]") {
  Environment env = {{"PATH", "/usr/bin:/bin"}};
  LaunchConfig config;
  config.python_exec = "/usr/bin/python3";
  config.program = "/abs/train.py";
  config.program_args = {"--lr", "${local_rank}"};
  config.run_path = true;
  config.no_python = true;  // --run_path wins over --no_python (and -m)
  config.module = true;
  auto argv = build_worker_argv(config, env, 1);
  REQUIRE(argv.size() == 7);
  CHECK(argv[0] == "/usr/bin/python3");
  CHECK(argv[1] == "-u");
  CHECK(argv[2] == "-c");
  CHECK_THAT(argv[3],
             Catch::Matchers::Contains("runpy.run_path(sys.argv[0], run_name=\"__main__\")"));
  CHECK(std::vector<std::string>(argv.begin() + 4, argv.end()) ==
        std::vector<std::string>{"/abs/train.py", "--lr", "1"});
}

TEST_CASE("NCCL's async error handling goes by the name the workers' PyTorch reads", "[env]") {
  LaunchConfig config;
  config.nproc_per_node = 1;
  auto names = [&](std::optional<int> torch_major) {
    config.worker_torch_major = torch_major;
    auto worker = as_map(build_worker_env(config, {}, AttemptInfo{}, 0, "e"));
    return std::pair{worker.count("TORCH_NCCL_ASYNC_ERROR_HANDLING") == 1,
                     worker.count("NCCL_ASYNC_ERROR_HANDLING") == 1};
  };
  // PyTorch 2.x warns on every rank when the old name is set: torchrun 2.x sets the new only.
  CHECK(names(2) == std::pair{true, false});
  // PyTorch 1.x reads only the old name (torchrun 1.13 set only it).
  CHECK(names(1) == std::pair{true, true});
  // Unknown (a native worker, or no torch found): both, so either PyTorch gets it.
  CHECK(names(std::nullopt) == std::pair{true, true});
  // A user's own setting of the old name is kept even for 2.x.
  config.worker_torch_major = 2;
  auto kept =
      as_map(build_worker_env(config, {{"NCCL_ASYNC_ERROR_HANDLING", "0"}}, AttemptInfo{}, 0, "e"));
  CHECK(kept["NCCL_ASYNC_ERROR_HANDLING"] == "0");
}
