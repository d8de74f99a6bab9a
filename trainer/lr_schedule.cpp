#include "trainer/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "common/error.hpp"

namespace ddp::trainer {

double LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) {
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  const double progress = std::clamp(static_cast<double>(step - warmup_steps) / span, 0.0, 1.0);
  const double min_lr = base_lr * min_lr_ratio;
  return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

void validate(const LrSchedule& schedule) {
  if (!(schedule.base_lr > 0.0 && std::isfinite(schedule.base_lr))) {
    throw ConfigError("--lr " + std::to_string(schedule.base_lr) + ": expected a finite value > 0");
  }
  if (schedule.warmup_steps < 0) {
    throw ConfigError("--warmup_steps " + std::to_string(schedule.warmup_steps) +
                      ": expected a value >= 0");
  }
  if (!(schedule.min_lr_ratio >= 0.0 && schedule.min_lr_ratio <= 1.0)) {
    throw ConfigError("--min_lr_ratio " + std::to_string(schedule.min_lr_ratio) +
                      ": expected a value in [0, 1]");
  }
}

}  // namespace ddp::trainer
