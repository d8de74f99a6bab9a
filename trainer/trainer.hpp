#pragma once
// The data-parallel training loop on CPU: DistributedSampler per epoch, per-rank batches,
// gradients all-reduced in buckets while backward runs, optimizer step, rank-0 progress and
// metrics, validation reduced across ranks, atomic checkpoints and resume.
#include <cstdint>
#include <fstream>
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
#include "worker_runtime/dist_context.hpp"
#include "worker_runtime/distributed_sampler.hpp"
#include "worker_runtime/gradient_bucketer.hpp"
#include "worker_runtime/process_group.hpp"
#include "worker_runtime/state_agreement.hpp"

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
  // The job this worker joined (null: solo). When it is in place (context->in_place()) a
  // failed collective is recovered from without exiting (trainer/in_place.cpp).
  worker_runtime::DistContext* context = nullptr;
};

class Trainer {
 public:
  // ConfigError when the data does not fit the model flags.
  // group: the process group to start with (the context's, when there is one).
  Trainer(const TrainOptions& options, worker_runtime::ProcessGroup& group,
          const WorkerInfo& worker, Split data);
  ~Trainer();

  // Trains to the end (or --max_steps), resuming from --checkpoint_dir when it holds a
  // checkpoint. Collective: every rank calls it.
  TrainResult run();

  // Parameters on the host (a copy for a GPU model).
  [[nodiscard]] std::span<const float> parameters() { return model_->host_parameters(); }
  // Gradient buckets whose all-reduce started during the last step's backward pass.
  [[nodiscard]] std::size_t buckets_launched_early() const {
    return bucketer_->buckets_launched_early();
  }

 private:
  // Uses group from now on (first group, or the new one after an in-place recovery): rank,
  // world, and everything bound to a group (bucketer, consistency check, sampler).
  void attach(worker_runtime::ProcessGroup& group);
  // Everything before the first step: the checkpoint (or, in place, the state of the
  // survivors when there are any). True when training continues from saved or received state.
  bool start();
  // Loads the checkpoint if there is one (epoch_, global_position_, step_...); true if so.
  bool resume();
  // Epochs, validation, checkpoints and the final weights, from the current position; may
  // be entered again after an in-place recovery (it continues from the agreed state).
  void train_all(TrainResult& result);
  // Trains epoch_ from global_position_; false when --max_steps stopped it early.
  bool train_epoch();
  void train_step(std::span<const int64_t> indices);
  void log_progress();
  EvalResult evaluate(int64_t epoch);
  // global_position: where a resume continues in epoch (samples of all ranks).
  void save_checkpoint(const std::string& path, int64_t epoch, int64_t global_position,
                       bool with_state);
  void maybe_inject_fault() const;
  void log_samples(std::span<const int64_t> indices);
  [[nodiscard]] std::string checkpoint_path() const;

  // In-place recovery (trainer/in_place.cpp).
  [[nodiscard]] bool in_place() const { return context_ != nullptr && context_->in_place(); }
  // After a failed collective: the new round's group, then the state sync; again while
  // membership keeps changing. Rethrows when the agent is gone or silent.
  void recover_in_place(const std::string& why);
  // Called from a `catch (const CollectiveError& e)`: recovers in place, or rethrows the
  // exception being handled when this is no membership change to recover from (not in
  // place; ConsistencyError: ranks disagree, a bug; RecoveryError: the agent is gone).
  void recover_or_rethrow(const CollectiveError& e);
  // The state sync every rank of a new group runs (survivors live, fresh workers not);
  // reports `joined`, and rank 0 prints the recovery when announce. Returns the agreement.
  worker_runtime::StateAgreement sync_state(bool announce);
  // After the first step since a sync: `stepped` to the agent.
  void report_first_step();

  TrainOptions options_;
  worker_runtime::ProcessGroup* group_;
  worker_runtime::DistContext* context_;
  int rank_ = 0;
  int world_ = 1;
  int restart_count_;
  Split data_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<worker_runtime::GradientBucketer> bucketer_;
  std::unique_ptr<worker_runtime::DistributedSampler> sampler_;
  std::unique_ptr<worker_runtime::ConsistencyChecker> consistency_;
  LrSchedule schedule_;
  std::unique_ptr<MetricsLog> log_;  // rank 0's; reopened when another rank becomes rank 0
  std::ofstream sample_log_;

  int64_t epoch_ = 0;
  int64_t global_position_ = 0;   // samples all ranks consumed so far in epoch_'s permutation
  int64_t step_ = 0;              // optimizer steps so far (drives the schedule)
  int64_t samples_seen_ = 0;      // global samples consumed over the whole run
  bool live_ = false;             // holds training state (from init+checkpoint, or received)
  int64_t lineage_ = -1;          // the round its state was last agreed in (in_place.hpp)
  bool stepped_pending_ = false;  // `stepped` not yet sent for the last sync
  double lr_ = 0;
  // Training metrics since the last progress line (this rank's sums).
  double loss_sum_ = 0;
  int64_t correct_ = 0;
  int64_t count_ = 0;
  double last_log_time_ = 0;
  double wait_seconds_ = 0;  // rank 0's time blocked in bucketer_->wait() since the last line
  int64_t last_log_samples_ = 0;
  std::vector<float> batch_x_;
  std::vector<int32_t> batch_y_;
};

}  // namespace ddp::trainer
