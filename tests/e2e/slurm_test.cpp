// A real SLURM on loopback (scripts/slurm/local_slurm.sh: munged, slurmctld, three slurmd):
// `srun` job steps and `sbatch` of the example script, with ddplaunch agents as the tasks; and
// a step over one node more than --nnodes allows (a spare).
#include <stdlib.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "agent_process.hpp"

namespace {

const std::string kSource = DDP_SOURCE_DIR;
const std::string kWorker = kSource + "/tests/e2e/scripts/worker.sh";
// Sleeps $NAP s: the group still runs when the spare's agent arrives.
const std::string kNapWorker = kSource + "/tests/e2e/scripts/job_worker.sh";

struct CommandResult {
  int status = -1;
  std::string output;
};

// Runs a shell command (with a `timeout` guard), returning its exit status and output.
CommandResult run(const std::string& command) {
  CommandResult r;
  FILE* pipe = ::popen(("timeout 120 " + command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) r.output.append(buf, n);
  const int st = ::pclose(pipe);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// Starts the local cluster in a private directory; stops it (and removes it) at scope end.
class LocalSlurm {
 public:
  LocalSlurm() : dir_(ddp::test::make_temp_dir()) {
    result_ =
        run("env DDP_SLURM_NODES=3 " + kSource + "/scripts/slurm/local_slurm.sh start " + dir_);
    if (result_.status == 0) ::setenv("SLURM_CONF", (dir_ + "/slurm.conf").c_str(), 1);
  }
  ~LocalSlurm() {
    run(kSource + "/scripts/slurm/local_slurm.sh stop " + dir_);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  LocalSlurm(const LocalSlurm&) = delete;
  LocalSlurm& operator=(const LocalSlurm&) = delete;
  [[nodiscard]] const CommandResult& started() const { return result_; }
  [[nodiscard]] const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  CommandResult result_;
};

std::set<int> ranks(const std::string& output, const std::string& world) {
  std::set<int> out;
  const std::regex re("RANK=(\\d+) LOCAL_RANK=\\d+ WORLD_SIZE=" + world + " ");
  for (std::sregex_iterator it(output.begin(), output.end(), re), end; it != end; ++it) {
    out.insert(std::stoi((*it)[1]));
  }
  return out;
}

}  // namespace

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_CASE("slurm: srun and sbatch job steps run ddplaunch with 2 workers per node",
          "[slurm][multinode]") {
  LocalSlurm slurm;
  if (slurm.started().status == 3) {
    WARN("SKIPPED: the local SLURM did not start (slurmctld/slurmd could not run here):\n" +
         slurm.started().output);
    return;
  }
  REQUIRE(slurm.started().status == 0);
  const std::string ddplaunch = std::string(DDP_BINARY_DIR) + "/ddplaunch";
  const std::string port = std::to_string(ddp::test::free_port());

  SECTION("srun: two nodes, ranks, run id from the job and step") {
    // n1/n2 do not resolve: the store address is the one thing given explicitly.
    const auto r =
        run("srun -N2 --ntasks-per-node=1 " + ddplaunch +
            " --nproc_per_node 2 --master_addr 127.0.0.1 --master_port " + port + " " + kWorker);
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(ranks(r.output, "4") == std::set<int>{0, 1, 2, 3});
    CHECK_THAT(r.output, Catch::Contains("GROUP_WORLD_SIZE=2"));
    CHECK(std::regex_search(r.output, std::regex("RUN_ID=\\d+\\.0")));
  }

  SECTION("srun: three nodes with --nnodes 2:2, the third one a spare, every task exits 0") {
    // No other setting: the agent that finds the group full stands by, and leaves with exit 0
    // when the job finishes without it (the step's exit status is 0, nothing hangs). The
    // agents share one machine: the first to bind the endpoint hosts the store.
    const auto r = run("env NAP=4 srun -N3 --ntasks-per-node=1 --kill-on-bad-exit=1 " + ddplaunch +
                       " --nnodes 2:2 --nproc_per_node 1 --rdzv_backend c10d" +
                       " --rdzv_endpoint 127.0.0.1:" + port + " " + kNapWorker);
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(ranks(r.output, "2") == std::set<int>{0, 1});
    CHECK(count(r.output, "WORKER RANK=") == 2);
    CHECK(count(r.output, "standing by as a spare for job ") == 1);
    CHECK(std::regex_search(r.output,
                            std::regex("spare for job \\d+\\.0 \\(group full at 2 nodes\\)")));
    CHECK_THAT(r.output, Catch::Contains("the job finished without needing this node"));
  }

  SECTION(
      "srun: --nnodes 2:2 in place, the third node a hot spare whose parked worker ends "
      "with the job, every task exits 0") {
    // The native trainer with --in_place_recovery: the spare starts its worker at once and
    // parks it (the ready line); the job finishes without needing it, the parked worker is
    // stopped, and the spare exits 0 like the members (3 s of training: the spare stands by
    // well before the end).
    const std::string train = std::string(DDP_BINARY_DIR) +
                              "/train --data synthetic --synthetic_rows 600 --batch_size 16 "
                              "--epochs 2 --fault_slow_step_ms 100";
    const auto r = run("srun -N3 --ntasks-per-node=1 --kill-on-bad-exit=1 " + ddplaunch +
                       " --nnodes 2:2 --nproc_per_node 1 --rdzv_backend c10d --in_place_recovery" +
                       " --rdzv_endpoint 127.0.0.1:" + port + " " + train);
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(count(r.output, "standing by as a spare for job ") == 1);
    CHECK(count(r.output,
                "this node's 1 worker(s) are ready, parked before their first "
                "collective") == 1);
    CHECK(count(r.output, "[train] done:") == 1);  // rank 0 of the two members
    CHECK_THAT(r.output, Catch::Contains("the job finished without needing this node"));
  }

  SECTION("sbatch: the example script, with flags from PET_* variables") {
    const std::string out = slurm.dir() + "/job.out";
    const auto r = run("env PROGRAM=" + kWorker + " PROGRAM_ARGS= NPROC=2 DDPLAUNCH=" + ddplaunch +
                       " PET_MASTER_ADDR=127.0.0.1 PET_MASTER_PORT=" + port +
                       " sbatch --wait --export=ALL --output=" + out + " " + kSource +
                       "/scripts/slurm/sbatch_example.sh");
    std::ifstream in(out);
    std::stringstream job;
    job << in.rdbuf();
    INFO(r.output + "\n--- job output ---\n" + job.str());
    REQUIRE(r.status == 0);
    CHECK(ranks(job.str(), "4") == std::set<int>{0, 1, 2, 3});
    // The script made a job secret and gave it to both agents (docs/security.md).
    CHECK_THAT(job.str(), !Catch::Contains("no --secret_file"));
  }
}
