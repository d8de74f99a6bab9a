// build/train as users run it: several workers under build/ddplaunch, killed workers, real data,
// bad input. Each run is small (a second or two) so the file stays well under a minute.
#include <catch2/catch.hpp>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <random>
#include <regex>

#include "tests/support/checkpoint_weights.hpp"
#include "tests/support/files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/wait_until.hpp"

using namespace ddp::test;
using Catch::Matchers::Contains;

namespace {

const std::string kTrain = build_path("train");
const std::string kLaunch = build_path("ddplaunch");
constexpr std::chrono::seconds kTimeout{120};

// A small synthetic job: 512 training rows, 16 steps per epoch at 2 ranks x 16 (or 1 x 32).
std::vector<std::string> job_args(const TempDir& dir, int64_t batch) {
  return {"--data",
          "synthetic",
          "--synthetic_rows",
          "640",
          "--synthetic_features",
          "16",
          "--synthetic_classes",
          "4",
          "--hidden",
          "32,32",
          "--batch_size",
          std::to_string(batch),
          "--epochs",
          "2",
          "--seed",
          "3",
          "--log_every",
          "8",
          "--out",
          dir.file("final.safetensors")};
}

ProcessResult launch(int nproc, int max_restarts, std::vector<std::string> train_args) {
  std::vector<std::string> argv{kLaunch,
                                "--standalone",
                                "--nproc_per_node",
                                std::to_string(nproc),
                                "--max_restarts",
                                std::to_string(max_restarts),
                                kTrain};
  argv.insert(argv.end(), train_args.begin(), train_args.end());
  ProcessResult r = run_process(argv, kTimeout);
  INFO(r.output);
  REQUIRE_FALSE(r.timed_out);
  return r;
}

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0;
  double norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += std::pow(static_cast<double>(a[i]) - static_cast<double>(b[i]), 2);
    norm += std::pow(static_cast<double>(a[i]), 2);
  }
  return std::sqrt(diff / norm);
}

// The "global validation accuracy X" of rank 0's final line.
double final_accuracy(const std::string& output) {
  std::smatch m;
  REQUIRE(std::regex_search(output, m, std::regex("global validation accuracy ([0-9.]+)")));
  return std::stod(m[1]);
}

}  // namespace

TEST_CASE("2 workers x batch B equal 1 worker x batch 2B after K steps", "[launch][equivalence]") {
  TempDir two;
  TempDir one;
  const std::vector<std::string> sgd{"--optimizer", "sgd", "--lr", "0.05", "--max_steps", "24"};
  const auto r2 = launch(2, 0, with(job_args(two, 16), sgd));
  REQUIRE(r2.exit_code == 0);
  const auto r1 = launch(1, 0, with(job_args(one, 32), sgd));
  REQUIRE(r1.exit_code == 0);
  const auto a = checkpoint_weights(two.file("final.safetensors"));
  const auto b = checkpoint_weights(one.file("final.safetensors"));
  CHECK(relative_difference(a, b) < 1e-5);  // only float summation order differs
  CHECK_THAT(r2.output, Contains("done: 24 steps"));
  CHECK_THAT(r1.output, Contains("done: 24 steps"));
}

TEST_CASE("a killed run restarted by hand ends like an uninterrupted one", "[launch][resume]") {
  TempDir whole;
  TempDir cut;
  const auto ckpt = [](const TempDir& d) {
    return std::vector<std::string>{"--checkpoint_dir", d.file("ckpt"), "--checkpoint_every", "5"};
  };
  REQUIRE(launch(2, 0, with(job_args(whole, 16), ckpt(whole))).exit_code == 0);
  // First attempt: rank 1 SIGKILLs itself after step 13 and, with no restarts, the job fails.
  const auto killed =
      launch(2, 0, with(job_args(cut, 16), with(ckpt(cut), {"--fault_kill_at_step", "13"})));
  CHECK(killed.exit_code != 0);
  CHECK_FALSE(std::filesystem::exists(cut.file("final.safetensors")));
  // Same command again: it continues from the step-10 checkpoint instead of starting over.
  const auto resumed = launch(2, 0, with(job_args(cut, 16), ckpt(cut)));
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Contains("resumed from") && Contains("step 10"));
  CHECK(checkpoint_weights(cut.file("final.safetensors")) ==
        checkpoint_weights(whole.file("final.safetensors")));
}

TEST_CASE("a resume at another world size keeps the global sample position", "[launch][resume]") {
  TempDir whole;
  TempDir cut;
  const std::vector<std::string> sgd{"--optimizer", "sgd", "--lr", "0.05"};
  const auto ckpt = [](const TempDir& d) {
    return std::vector<std::string>{"--checkpoint_dir", d.file("ckpt"), "--checkpoint_every", "5"};
  };
  REQUIRE(launch(1, 0, with(job_args(whole, 32), sgd)).exit_code == 0);
  // 1 worker x 32 dies after step 13 (checkpoint at step 10, 320 samples into epoch 0) ...
  const auto killed = launch(
      1, 0, with(with(job_args(cut, 32), sgd), with(ckpt(cut), {"--fault_kill_at_step", "13"})));
  CHECK(killed.exit_code != 0);
  // ... and 2 workers x 16 continue from sample 320: the same global batches as 1 x 32.
  const auto resumed = launch(2, 0, with(with(job_args(cut, 16), sgd), ckpt(cut)));
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Contains("resumed from") && Contains("done: 32 steps"));
  CHECK(relative_difference(checkpoint_weights(cut.file("final.safetensors")),
                            checkpoint_weights(whole.file("final.safetensors"))) < 1e-5);
}

TEST_CASE("a trainer SIGKILLed mid-checkpoint leaves no temp file after the next checkpoint",
          "[launch][resume]") {
  TempDir dir;
  const auto ckpt_dir = std::filesystem::path(dir.file("ckpt"));
  const auto temp_files = [&] {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(ckpt_dir, ec)) {
      if (e.path().filename().string().find(".tmp.") != std::string::npos) {
        names.push_back(e.path().filename().string());
      }
    }
    return names;
  };
  // A wide model (about 50 MB per checkpoint) checkpointed every step: SIGKILL lands while a
  // write is in progress. A kill that lands between writes is tried again.
  for (int attempt = 0; attempt < 10 && temp_files().empty(); ++attempt) {
    ChildOptions options;
    options.argv = {kTrain,
                    "--data",
                    "synthetic",
                    "--synthetic_rows",
                    "640",
                    "--synthetic_features",
                    "16",
                    "--hidden",
                    "2048,2048",
                    "--batch_size",
                    "8",
                    "--max_steps",
                    "1000",
                    "--checkpoint_dir",
                    ckpt_dir.string(),
                    "--checkpoint_every",
                    "1"};
    ChildProcess trainer(options);
    REQUIRE(wait_until([&] { return !temp_files().empty(); }, std::chrono::seconds(60)));
    trainer.signal(SIGKILL);
    trainer.wait(kTimeout);
  }
  const auto left = temp_files();
  REQUIRE(left.size() == 1);
  // The next run (a small job, so it must not resume the wide model) writes checkpoints there.
  std::filesystem::remove(ckpt_dir / "checkpoint.safetensors");
  std::filesystem::remove(ckpt_dir / "checkpoint.safetensors.json");
  const auto r = launch(
      1, 0,
      with(job_args(dir, 32), {"--checkpoint_dir", ckpt_dir.string(), "--checkpoint_every", "5"}));
  REQUIRE(r.exit_code == 0);
  CHECK(std::filesystem::exists(ckpt_dir / "checkpoint.safetensors"));
  CHECK(temp_files().empty());
}

TEST_CASE("ddplaunch --max_restarts 3 survives a worker SIGKILLed at a random step",
          "[launch][fault]") {
  TempDir clean;
  TempDir faulty;
  const auto ckpt = [](const TempDir& d) {
    return std::vector<std::string>{"--checkpoint_dir", d.file("ckpt"), "--checkpoint_every", "4"};
  };
  const auto reference = launch(2, 3, with(job_args(clean, 16), ckpt(clean)));
  REQUIRE(reference.exit_code == 0);
  std::random_device rd;
  const int kill_at = 1 + static_cast<int>(rd() % 31);  // any of the 32 steps but the last
  INFO("worker killed after step " << kill_at);
  const auto r = launch(2, 3,
                        with(job_args(faulty, 16),
                             with(ckpt(faulty), {"--fault_kill_at_step", std::to_string(kill_at),
                                                 "--fault_rank", std::to_string(kill_at % 2)})));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("sending myself SIGKILL"));
  CHECK(final_accuracy(r.output) == final_accuracy(reference.output));
  CHECK(checkpoint_weights(faulty.file("final.safetensors")) ==
        checkpoint_weights(clean.file("final.safetensors")));
}

TEST_CASE("2 workers reach >= 95% validation accuracy on the digits", "[launch][digits]") {
  const std::string data = source_path("data/digits.csv.gz");
  if (!std::filesystem::exists(data)) {
    const auto fetch = run_process({source_path("scripts/fetch_digits.sh")}, kTimeout);
    INFO(fetch.output);
    REQUIRE(fetch.exit_code == 0);
  }
  TempDir dir;
  const auto r = launch(2, 0,
                        {"--data", data, "--epochs", "20", "--batch_size", "32", "--lr", "0.003",
                         "--warmup_steps", "20", "--seed", "1", "--log_every", "100"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(final_accuracy(r.output) >= 0.95);
  // Validation metrics are reduced across ranks: both ranks print the same last accuracy.
  std::smatch m0;
  std::smatch m1;
  REQUIRE(
      std::regex_search(r.output, m0, std::regex("rank 0 epoch 19 step \\d+ accuracy ([0-9.]+)")));
  REQUIRE(
      std::regex_search(r.output, m1, std::regex("rank 1 epoch 19 step \\d+ accuracy ([0-9.]+)")));
  CHECK(m0[1] == m1[1]);
}

TEST_CASE("bad data files and flags fail with a clear message", "[launch][errors]") {
  TempDir dir;
  const auto run = [](std::vector<std::string> args) {
    args.insert(args.begin(), kTrain);
    return run_process(args, kTimeout);
  };
  auto r = run({"--data", dir.file("missing.csv")});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("missing.csv") && Contains("cannot open"));
  const auto bad = dir.write("bad.csv", "1,2,0\n3,4,1\n5,x,1\n");
  r = run({"--data", bad});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("bad.csv:3") && Contains("column 2 is 'x'"));
  r = run({"--batch_size", "-4"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("--batch_size -4"));
  r = run({"--optimizer", "adam"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("'adam'"));
  // Under the launcher the worker's error reaches the user too (and the job fails).
  const auto launched = launch(2, 0, {"--data", bad});
  CHECK(launched.exit_code != 0);
  CHECK_THAT(launched.output, Contains("bad.csv:3"));
}
