#pragma once
// The data-parallel training loop on CPU: DistributedSampler per epoch, per-rank batches,
// gradients all-reduced in buckets while backward runs, optimizer step, rank-0 progress and
// metrics, validation reduced across ranks, atomic checkpoints and resume.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "trainer/dataset.hpp"
#include "trainer/lr_schedule.hpp"
#include "trainer/metrics_log.hpp"
#include "trainer/model.hpp"
#include "trainer/optimizer.hpp"
#include "trainer/train_options.hpp"
#include "worker_runtime/consistency.hpp"
#include "worker_runtime/distributed_sampler.hpp"
#include "worker_runtime/gradient_bucketer.hpp"
#include "worker_runtime/process_group.hpp"

namespace ddp::trainer {

// Global (all-rank) validation metrics.
struct EvalResult {
  double accuracy = 0;
  double loss = 0;
  int64_t count = 0;
};

struct TrainResult {
  EvalResult validation;  // after the last step
  int64_t steps = 0;      // optimizer steps taken, including those before a resume
  bool resumed = false;   // started from a checkpoint
};

// Who this worker is beyond its rank, and where its model lives.
struct WorkerInfo {
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT (fault injection fires on attempt 0)
  int local_rank = 0;     // CUDA device of the GPU model
  bool use_cuda = false;  // GPU model (gradients in device memory: NCCL group or solo)
};

class Trainer {
 public:
  // ConfigError when the data does not fit the model flags.
  Trainer(const TrainOptions& options, worker_runtime::ProcessGroup& group,
          const WorkerInfo& worker, Split data);

  // Trains to the end (or --max_steps), resuming from --checkpoint_dir when it holds a
  // checkpoint. Collective: every rank calls it.
  TrainResult run();

  // Parameters on the host (a copy for a GPU model).
  [[nodiscard]] std::span<const float> parameters() { return model_->host_parameters(); }
  // Gradient buckets whose all-reduce started during the last step's backward pass.
  [[nodiscard]] std::size_t buckets_launched_early() const {
    return bucketer_.buckets_launched_early();
  }

 private:
  // Loads the checkpoint if there is one; returns the per-rank start position in epoch_.
  std::optional<int64_t> resume();
  // Trains epoch_ from start; false when --max_steps stopped it early.
  bool train_epoch(int64_t start);
  void train_step(std::span<const int64_t> indices);
  void log_progress();
  EvalResult evaluate(int64_t epoch);
  void save_checkpoint(const std::string& path, int64_t epoch, int64_t position, bool with_state);
  void maybe_inject_fault() const;
  [[nodiscard]] std::string checkpoint_path() const;

  TrainOptions options_;
  worker_runtime::ProcessGroup& group_;
  int rank_;
  int world_;
  int restart_count_;
  Split data_;
  std::unique_ptr<Model> model_;
  worker_runtime::GradientBucketer bucketer_;
  worker_runtime::DistributedSampler sampler_;
  worker_runtime::ConsistencyChecker consistency_;
  LrSchedule schedule_;
  MetricsLog log_;

  int64_t epoch_ = 0;
  int64_t step_ = 0;          // optimizer steps so far (drives the schedule)
  int64_t samples_seen_ = 0;  // global samples consumed over the whole run
  double lr_ = 0;
  // Training metrics since the last progress line (this rank's sums).
  double loss_sum_ = 0;
  int64_t correct_ = 0;
  int64_t count_ = 0;
  double last_log_time_ = 0;
  double wait_seconds_ = 0;  // rank 0's time blocked in bucketer_.wait() since the last line
  int64_t last_log_samples_ = 0;
  std::vector<float> batch_x_;
  std::vector<int32_t> batch_y_;
};

}  // namespace ddp::trainer
