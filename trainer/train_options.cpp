#include "trainer/train_options.hpp"

#include <string>

#include "common/error.hpp"

namespace ddp::trainer {
namespace {

void require(bool ok, const std::string& flag, const std::string& value, const char* expected) {
  if (!ok) throw ConfigError(flag + " " + value + ": expected " + expected);
}

}  // namespace

void validate(const TrainOptions& o) {
  using std::to_string;
  require(!o.data.empty(), "--data", "''", "a file path or 'synthetic'");
  require(o.val_fraction >= 0.0 && o.val_fraction < 1.0, "--val_fraction",
          to_string(o.val_fraction), "a value in [0, 1)");
  require(o.synthetic_rows > 0, "--synthetic_rows", to_string(o.synthetic_rows), "> 0");
  require(o.synthetic_features > 0, "--synthetic_features", to_string(o.synthetic_features), "> 0");
  require(o.synthetic_classes >= 2, "--synthetic_classes", to_string(o.synthetic_classes), ">= 2");
  require(o.synthetic_separation >= 0.0, "--synthetic_separation",
          to_string(o.synthetic_separation), ">= 0");
  for (const std::size_t h : o.hidden) {
    require(h > 0 && h <= (1U << 20), "--hidden", to_string(h), "sizes in 1..1048576");
  }
  require(o.epochs > 0, "--epochs", to_string(o.epochs), "> 0");
  require(o.batch_size > 0 && o.batch_size <= (1 << 24), "--batch_size", to_string(o.batch_size),
          "a value in 1..16777216");
  require(o.max_steps >= 0, "--max_steps", to_string(o.max_steps), ">= 0");
  require(o.backend == "auto" || o.backend == "gloo" || o.backend == "nccl", "--backend",
          "'" + o.backend + "'", "auto, gloo or nccl");
  require(o.bucket_cap_mb > 0.0, "--bucket_cap_mb", to_string(o.bucket_cap_mb), "> 0");
  require(o.gloo_direct_max_mb >= 0.0 && o.gloo_direct_max_mb <= 1024.0, "--gloo_direct_max_mb",
          to_string(o.gloo_direct_max_mb), "a value in [0, 1024]");
  require(o.consistency_every >= 0, "--consistency_every", to_string(o.consistency_every), ">= 0");
  require(o.blas_threads >= 1 && o.blas_threads <= 1024, "--blas_threads",
          to_string(o.blas_threads), "a value in 1..1024");
  require(o.log_every > 0, "--log_every", to_string(o.log_every), "> 0");
  require(o.checkpoint_every >= 0, "--checkpoint_every", to_string(o.checkpoint_every), ">= 0");
  require(o.fault_kill_at_step >= 0, "--fault_kill_at_step", to_string(o.fault_kill_at_step),
          ">= 0");
  require(o.fault_hang_at_step >= 0, "--fault_hang_at_step", to_string(o.fault_hang_at_step),
          ">= 0");
  require(o.fault_slow_step_ms >= 0, "--fault_slow_step_ms", to_string(o.fault_slow_step_ms),
          ">= 0");
  require(o.fault_kill_node_at_step >= 0, "--fault_kill_node_at_step",
          to_string(o.fault_kill_node_at_step), ">= 0");
  LrSchedule schedule{o.lr, o.warmup_steps, 1, o.min_lr_ratio};
  validate(schedule);
  // Optimizer hyper-parameters are checked where the optimizer is built (make_optimizer).
}

}  // namespace ddp::trainer
