// The training loop in-process (one rank, no launcher): learning, checkpoints, resume, metrics.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "tests/support/temp_dir.hpp"
#include "trainer/prepare_data.hpp"
#include "trainer/solo_process_group.hpp"
#include "trainer/trainer.hpp"
#include "worker_runtime/dist_context.hpp"

using namespace ddp::trainer;
using Catch::Matchers::Contains;
using ddp::test::TempDir;

namespace {

TrainOptions small_run(const TempDir& dir) {
  TrainOptions o;
  o.data = "synthetic";
  o.synthetic_rows = 320;  // 256 train rows: 16 steps per epoch at batch 16
  o.synthetic_features = 8;
  o.synthetic_classes = 4;
  o.hidden = {16};
  o.batch_size = 16;
  o.epochs = 3;
  o.lr = 0.01;
  o.warmup_steps = 5;
  o.seed = 42;
  o.log_every = 4;
  o.checkpoint_dir = dir.file("ckpt");
  return o;
}

struct Outcome {
  TrainResult result;
  std::vector<float> params;
};

Outcome train(const TrainOptions& o, const WorkerInfo& worker = {}) {
  SoloProcessGroup group;
  Trainer t(o, group, worker, prepare_data(o));
  Outcome out;
  out.result = t.run();
  const auto params = t.parameters();
  out.params.assign(params.begin(), params.end());
  return out;
}

}  // namespace

TEST_CASE("the loop learns the synthetic task", "[loop]") {
  TempDir dir;
  TrainOptions o = small_run(dir);
  o.checkpoint_dir.clear();
  const Outcome out = train(o);
  CHECK(out.result.steps == 48);
  CHECK(out.result.validation.count == 64);
  CHECK(out.result.validation.accuracy > 0.9);
}

TEST_CASE("a run stopped at step 13 and resumed equals an uninterrupted run", "[loop][resume]") {
  TempDir whole_dir;
  TempDir cut_dir;
  const Outcome whole = train(small_run(whole_dir));

  TrainOptions cut = small_run(cut_dir);
  cut.checkpoint_every = 5;
  cut.max_steps = 13;  // checkpoints at 5 and 10; steps 11..13 are lost as in a crash
  CHECK(train(cut).result.steps == 13);
  cut.max_steps = 0;
  const Outcome resumed = train(cut);
  CHECK(resumed.result.resumed);
  CHECK(resumed.result.steps == whole.result.steps);
  CHECK(resumed.params == whole.params);  // bit-identical: same data order, state and schedule
  CHECK(resumed.result.validation.accuracy == whole.result.validation.accuracy);
}

TEST_CASE("SGD state survives a resume too", "[loop][resume]") {
  TempDir whole_dir;
  TempDir cut_dir;
  TrainOptions o = small_run(whole_dir);
  o.optimizer.name = "sgd";
  o.lr = 0.05;
  const Outcome whole = train(o);
  TrainOptions cut = small_run(cut_dir);
  cut.optimizer.name = "sgd";
  cut.lr = 0.05;
  cut.max_steps = 20;  // epoch 0 ended at 16: resume mid-epoch 1 from its start
  train(cut);
  cut.max_steps = 0;
  CHECK(train(cut).params == whole.params);
}

TEST_CASE("a checkpoint from a different model or seed is refused", "[loop][resume]") {
  TempDir dir;
  TrainOptions o = small_run(dir);
  o.epochs = 1;
  train(o);
  TrainOptions other = o;
  other.hidden = {32};
  CHECK_THROWS_WITH(train(other), Contains("layers.0.weight"));
  other = o;
  other.seed = 7;
  CHECK_THROWS_WITH(train(other), Contains("--seed 42") && Contains("--seed 7"));
}

TEST_CASE("rank 0 writes every metric as JSON lines", "[loop][metrics]") {
  TempDir dir;
  TrainOptions o = small_run(dir);
  o.metrics = dir.file("metrics.jsonl");
  o.out = dir.file("final.safetensors");
  train(o);
  std::ifstream in(o.metrics);
  int train_lines = 0;
  int val_lines = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["kind"] == "train") {
      ++train_lines;
      CHECK(j.contains("loss"));
      CHECK(j.contains("samples_per_s"));
    }
    if (j["kind"] == "val") ++val_lines;
  }
  CHECK(train_lines == 12);  // 48 steps, a line every 4
  CHECK(val_lines == 3);     // one per epoch
  CHECK(std::filesystem::exists(o.out));
}

TEST_CASE("small buckets start their all-reduce during backward", "[loop][overlap]") {
  TempDir dir;
  TrainOptions o = small_run(dir);
  o.checkpoint_dir.clear();
  o.hidden = {256, 256};
  o.max_steps = 2;
  o.bucket_cap_mb = 0.1;  // layers of ~2k, ~66k and ~2k floats: a bucket each
  ddp::trainer::SoloProcessGroup group;
  Trainer t(o, group, WorkerInfo{}, prepare_data(o));
  t.run();
  // Every bucket is started from backward's layer-ready callbacks (last layer first), the
  // first two while the layers below are still being computed; none is left for wait().
  CHECK(t.buckets_launched_early() == 3);
}

TEST_CASE("a batch larger than a rank's share of the data is refused", "[loop]") {
  TempDir dir;
  TrainOptions o = small_run(dir);
  o.batch_size = 1000;
  CHECK_THROWS_WITH(train(o), Contains("--batch_size 1000") && Contains("256 training rows"));
}

TEST_CASE("the CUDA model trains like the CPU model", "[gpu]") {
  if (ddp::worker_runtime::cuda_device_count() == 0) {
    WARN("no GPU visible: skipped");
    return;
  }
  TempDir cpu_dir;
  TempDir gpu_dir;
  for (const char* optimizer : {"adamw", "sgd"}) {
    TrainOptions o = small_run(cpu_dir);
    o.optimizer.name = optimizer;
    const Outcome cpu = train(o);
    TrainOptions g = small_run(gpu_dir);
    g.optimizer.name = optimizer;
    WorkerInfo gpu;
    gpu.use_cuda = true;
    const Outcome cuda = train(g, gpu);
    double diff = 0;
    double norm = 0;
    for (std::size_t i = 0; i < cpu.params.size(); ++i) {
      const double d = static_cast<double>(cpu.params[i]) - static_cast<double>(cuda.params[i]);
      diff += d * d;
      norm += static_cast<double>(cpu.params[i]) * static_cast<double>(cpu.params[i]);
    }
    INFO(optimizer);
    CHECK(std::sqrt(diff / norm) < 1e-3);  // cuBLAS and OpenBLAS sum in different orders
    CHECK(cuda.result.validation.accuracy > 0.9);
    std::filesystem::remove_all(cpu_dir.path() / "ckpt");
    std::filesystem::remove_all(gpu_dir.path() / "ckpt");
  }
}
