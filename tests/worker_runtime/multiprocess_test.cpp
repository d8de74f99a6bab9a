// Gloo in real processes: a StoreServer on port 0 in the test process, one rt_test_worker
// child per rank (killed and reaped whatever happens).
#include <catch2/catch.hpp>
#include <functional>
#include <regex>

#include "rendezvous/store/server/store_server.hpp"
#include "test_support.hpp"
#include "tests/support/files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using namespace ddp::worker_runtime::test;
using namespace ddp::test;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

const std::string kWorker = build_path("tests/rt_test_worker");

struct Job {
  std::vector<int> codes;
  std::vector<std::string> logs;
  std::vector<std::string> error_files;
};

using EnvFor = std::function<std::map<std::string, std::string>(int rank)>;

// The torchrun contract of `rank` in a world of `world`, the store at port (agent-hosted).
std::map<std::string, std::string> torchrun_env(int rank, int world, uint16_t port) {
  return {{"RANK", std::to_string(rank)},
          {"LOCAL_RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_WORLD_SIZE", std::to_string(world)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)},
          {"TORCHELASTIC_USE_AGENT_STORE", "True"},
          {"DDPLAUNCH_BACKEND", "gloo"}};
}

// Starts ranks [0, started) with env_for(rank) (+ an error file each) and waits for all.
Job run_ranks_with(const std::string& scenario, int started, const std::string& timeout_ms,
                   const TempDir& dir, const EnvFor& env_for) {
  std::vector<std::unique_ptr<ChildProcess>> children;
  Job job;
  for (int r = 0; r < started; ++r) {
    const std::string err = (dir.path() / ("error" + std::to_string(r) + ".json")).string();
    job.error_files.push_back(err);
    ChildOptions options;
    options.argv = {kWorker, scenario, timeout_ms};
    options.env = env_for(r);
    options.env["TORCHELASTIC_ERROR_FILE"] = err;
    options.merge_stderr = true;
    children.push_back(std::make_unique<ChildProcess>(options));
  }
  for (auto& c : children) {
    job.codes.push_back(c->wait(60s));
  }
  for (auto& c : children) {
    job.logs.push_back(c->out());
  }
  for (auto& err : job.error_files) {
    err = read_file(err);
  }
  return job;
}

// Ranks [0, started) of a world of `world`, with a StoreServer on port 0 in this process
// standing in for the agent's store.
Job run_job(const std::string& scenario, int world, int started, const std::string& timeout_ms,
            const TempDir& dir) {
  ddp::rendezvous::StoreServerOptions so;
  so.host = "127.0.0.1";
  ddp::rendezvous::StoreServer server(so);
  return run_ranks_with(scenario, started, timeout_ms, dir,
                        [&](int rank) { return torchrun_env(rank, world, server.port()); });
}

// A port the kernel just handed out (bound to 0, then released) for rank 0's own server.
uint16_t free_port() {
  ddp::rendezvous::StoreServerOptions so;
  so.host = "127.0.0.1";
  ddp::rendezvous::StoreServer probe(so);
  return probe.port();
}

std::vector<std::string> results(const std::string& log) {
  std::vector<std::string> out;
  std::regex re("RESULT [^\n]*");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator();
       ++it) {
    out.push_back(it->str());
  }
  return out;
}

}  // namespace

TEST_CASE("gloo collectives in 2-4 real processes", "[gloo][multiprocess]") {
  const int world = GENERATE(2, 3, 4);
  TempDir dir;
  const Job job = run_job("collectives", world, world, "30000", dir);
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << " log:\n" << job.logs[static_cast<size_t>(r)]);
    CHECK(job.codes[static_cast<size_t>(r)] == 0);
    CHECK_THAT(job.logs[static_cast<size_t>(r)], Contains("RESULT backend gloo"));
    CHECK(results(job.logs[static_cast<size_t>(r)]) == results(job.logs[0]));
  }
}

TEST_CASE("metric reduction gives identical results on every rank", "[metrics][multiprocess]") {
  TempDir dir;
  const int world = 3;
  const Job job = run_job("metrics", world, world, "30000", dir);
  // sum(0.5 n^2) / sum(n) for n = 1..3 = 7 / 6; accuracy = (0+1+2) / 6 = 0.5
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << " log:\n" << job.logs[static_cast<size_t>(r)]);
    CHECK(job.codes[static_cast<size_t>(r)] == 0);
    CHECK(results(job.logs[static_cast<size_t>(r)]) == results(job.logs[0]));
  }
  CHECK_THAT(job.logs[0], Contains("RESULT loss 1.1666666666666667"));
  CHECK_THAT(job.logs[0], Contains("RESULT accuracy 0.5"));
}

TEST_CASE("a missing rank makes init() time out with an error file",
          "[gloo][multiprocess][timeout]") {
  TempDir dir;
  // World of 3, only 2 started: both must fail within the 1.5 s store timeout, not hang.
  const Job job = run_job("collectives", 3, 2, "1500", dir);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << " log:\n" << job.logs[static_cast<size_t>(r)]);
    CHECK(job.codes[static_cast<size_t>(r)] == 1);
    CHECK_THAT(job.error_files[static_cast<size_t>(r)],
               Contains("CollectiveError") && Contains("rank " + std::to_string(r) + "/3"));
  }
}

TEST_CASE("a rank skipping a collective makes it time out, not hang",
          "[gloo][multiprocess][timeout]") {
  TempDir dir;
  const Job job = run_job("hang", 2, 2, "30000", dir);
  INFO("rank 0 log:\n" << job.logs[0]);
  CHECK(job.codes[0] == 1);
  CHECK(job.codes[1] == 0);
  CHECK_THAT(job.error_files[0],
             Contains("all_reduce(sum, float32 x 16)") && Contains("timeout 1000 ms"));
}

TEST_CASE("without an agent store rank 0 hosts it (manual launch)", "[gloo][multiprocess]") {
  TempDir dir;
  const uint16_t port = free_port();
  const Job job = run_ranks_with("collectives", 3, "30000", dir, [&](int rank) {
    auto env = torchrun_env(rank, 3, port);
    env.erase("TORCHELASTIC_USE_AGENT_STORE");
    return env;
  });
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r << " log:\n" << job.logs[static_cast<size_t>(r)]);
    CHECK(job.codes[static_cast<size_t>(r)] == 0);
    CHECK_THAT(job.logs[static_cast<size_t>(r)], Contains("RESULT gathered 0 1 4"));
  }
}

TEST_CASE("a bare srun step joins through the SLURM variables", "[gloo][multiprocess][slurm]") {
  TempDir dir;
  const uint16_t port = free_port();
  const Job job = run_ranks_with("collectives", 2, "30000", dir, [&](int rank) {
    return std::map<std::string, std::string>{{"SLURM_PROCID", std::to_string(rank)},
                                              {"SLURM_LOCALID", std::to_string(rank)},
                                              {"SLURM_NTASKS", "2"},
                                              {"SLURM_NNODES", "1"},
                                              {"SLURM_JOB_NODELIST", "127.0.0.1"},
                                              {"MASTER_PORT", std::to_string(port)},
                                              {"DDPLAUNCH_BACKEND", "gloo"}};
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << " log:\n" << job.logs[static_cast<size_t>(r)]);
    CHECK(job.codes[static_cast<size_t>(r)] == 0);
    CHECK_THAT(job.logs[static_cast<size_t>(r)], Contains("RESULT gathered 0 1"));
  }
}
