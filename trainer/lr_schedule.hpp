#pragma once
// Linear warm-up then cosine decay, a pure function of the optimizer step.
#include <cstdint>

namespace ddp::trainer {

struct LrSchedule {
  double base_lr = 1e-3;
  int64_t warmup_steps = 0;   // lr rises linearly to base_lr over these steps
  int64_t total_steps = 1;    // cosine reaches min_lr at this step
  double min_lr_ratio = 0.0;  // floor as a fraction of base_lr

  // Learning rate of 0-based step `step` (steps past total_steps stay at the floor).
  [[nodiscard]] double at(int64_t step) const;
};

// ConfigError naming the flag unless base_lr > 0, warmup_steps >= 0, 0 <= min_lr_ratio <= 1.
void validate(const LrSchedule& schedule);

}  // namespace ddp::trainer
