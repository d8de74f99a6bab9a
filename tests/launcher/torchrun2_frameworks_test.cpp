// What people run with torchrun, run under torchrun 2.x and under ddplaunch with the same
// command line: PyTorch Lightning's Trainer(strategy="ddp") and Hugging Face accelerate's
// Accelerator. Both must exit 0, see the same ranks and world size, and end with the same
// numbers (losses, weights, gathered values): gloo on 2 CPU workers is deterministic.
#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/launcher/torch2_reference.hpp"
#include "tests/support/files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using namespace ddp::test;
using namespace std::chrono_literals;

namespace {

constexpr auto kRunTimeout = 240s;
const std::string kDdplaunch = build_path("ddplaunch");

// "" when the venv's python imports module, else why not.
std::string cannot_import(const std::string& module) {
  auto result = run_process({torch2_python(), "-c", "import " + module}, 120s);
  if (result.exit_code == 0) return {};
  // The last line of the traceback: "ModuleNotFoundError: No module named 'lightning'".
  auto text = result.output;
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return torch2_python() + " cannot import " + module +
         " (scripts/setup_torch.sh installs it): " + text.substr(text.find_last_of('\n') + 1);
}

// Runs `launcher --standalone --nproc_per_node 2 script` and returns each rank's
// <name>_<rank>.json. (--standalone: a free port; ddplaunch's default is 29500, which
// another job on the machine may hold.)
std::map<int, nlohmann::json> run(const std::string& launcher, const std::string& script,
                                  const std::string& name) {
  TempDir dir;
  ChildOptions options;
  options.argv = {launcher, "--standalone", "--nproc_per_node", "2",
                  source_path("tests/launcher/workers/" + script)};
  options.env = {{"OUT_DIR", dir.path().string()}, {"PYTHON_EXEC", torch2_python()}};
  options.merge_stderr = true;
  ChildProcess agent(options);
  int status = agent.wait(kRunTimeout);
  INFO(launcher << "'s output:\n" << agent.out());
  REQUIRE(status == 0);
  std::map<int, nlohmann::json> results;
  for (int rank = 0; rank < 2; ++rank) {
    auto text = read_file(dir.path() / (name + "_" + std::to_string(rank) + ".json"));
    INFO("rank " << rank << " wrote no " << name << "_" << rank << ".json");
    REQUIRE_FALSE(text.empty());
    results[rank] = nlohmann::json::parse(text);
  }
  return results;
}

}  // namespace

TEST_CASE("Lightning Trainer(strategy='ddp') runs the same under torchrun 2.x and ddplaunch",
          "[pytorch][torchrun2]") {
  auto missing = torch2_missing();
  if (!missing.empty()) FAIL(missing);
  auto why_not = cannot_import("lightning");
  if (!why_not.empty()) {
    // The only skip here: CTest reports it as skipped (report_skipped), Catch2 as a warning.
    report_skipped(why_not);
    WARN("skipped: " << why_not);
    return;
  }
  auto torchrun = run(torch2_torchrun(), "lightning_ddp.py", "lightning");
  auto ddplaunch = run(kDdplaunch, "lightning_ddp.py", "lightning");
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank << ": torchrun " << torchrun[rank].dump() << "\nddplaunch "
                 << ddplaunch[rank].dump());
    CHECK(torchrun[rank]["global_rank"] == rank);
    CHECK(torchrun[rank]["env_rank"] == rank);
    CHECK(torchrun[rank]["local_rank"] == rank);
    CHECK(torchrun[rank]["world_size"] == 2);
    CHECK(torchrun[rank]["cluster_environment"] == "TorchElasticEnvironment");
    CHECK(torchrun[rank]["steps"] == 4);  // 64 samples, batch 8, split over 2 ranks
    CHECK(ddplaunch[rank] == torchrun[rank]);
  }
  // DDP kept the replicas in sync and the synced metric is the same on both ranks.
  CHECK(torchrun[0]["weights_sum"] == torchrun[1]["weights_sum"]);
  CHECK(torchrun[0]["train_loss"] == torchrun[1]["train_loss"]);
}

TEST_CASE("accelerate's Accelerator runs the same under torchrun 2.x and ddplaunch",
          "[pytorch][torchrun2]") {
  auto missing = torch2_missing();
  if (!missing.empty()) FAIL(missing);
  auto why_not = cannot_import("accelerate");
  if (!why_not.empty()) {
    report_skipped(why_not);
    WARN("skipped: " << why_not);
    return;
  }
  auto torchrun = run(torch2_torchrun(), "accelerate_ddp.py", "accelerate");
  auto ddplaunch = run(kDdplaunch, "accelerate_ddp.py", "accelerate");
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank << ": torchrun " << torchrun[rank].dump() << "\nddplaunch "
                 << ddplaunch[rank].dump());
    CHECK(torchrun[rank]["process_index"] == rank);
    CHECK(torchrun[rank]["env_rank"] == rank);
    CHECK(torchrun[rank]["local_process_index"] == rank);
    CHECK(torchrun[rank]["num_processes"] == 2);
    CHECK(torchrun[rank]["distributed_type"] == "DistributedType.MULTI_CPU");
    // gather of [10 * rank + 1, steps] from both ranks, in rank order, on every rank.
    CHECK(torchrun[rank]["gathered"] == nlohmann::json::array({1.0, 4.0, 11.0, 4.0}));
    CHECK(ddplaunch[rank] == torchrun[rank]);
  }
  CHECK(torchrun[0]["weights_sum"] == torchrun[1]["weights_sum"]);
}
