#include "trainer/optimizer.hpp"

#include <cmath>

#include "common/error.hpp"

namespace ddp::trainer {
namespace {

void check_size(std::size_t expected, std::size_t params, std::size_t grads) {
  if (params != expected || grads != expected) {
    throw ConfigError("optimizer built for " + std::to_string(expected) + " parameters got " +
                      std::to_string(params) + " parameters and " + std::to_string(grads) +
                      " gradients");
  }
}

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerOptions& o, std::size_t n)
      : momentum_(static_cast<float>(o.momentum)),
        weight_decay_(static_cast<float>(o.weight_decay)),
        buf_(n, 0.0F) {}

  void step(std::span<float> params, std::span<const float> grads, double lr) override {
    check_size(buf_.size(), params.size(), grads.size());
    const auto lr_f = static_cast<float>(lr);
    // torch.optim.SGD: the first step seeds the buffer with the gradient itself.
    const bool first = !started_;
    started_ = true;
    for (std::size_t i = 0; i < params.size(); ++i) {
      const float g = grads[i] + weight_decay_ * params[i];
      if (momentum_ != 0.0F) {
        buf_[i] = first ? g : momentum_ * buf_[i] + g;
        params[i] -= lr_f * buf_[i];
      } else {
        params[i] -= lr_f * g;
      }
    }
  }
  std::vector<StateBuffer> state_buffers() override { return {{"optimizer.momentum", buf_}}; }
  [[nodiscard]] nlohmann::json scalar_state() const override {
    return {{"name", "sgd"}, {"started", started_}};
  }
  void load_scalar_state(const nlohmann::json& state) override {
    if (state.value("name", "") != "sgd") {
      throw ConfigError("checkpoint holds optimizer state '" + state.value("name", "?") +
                        "', expected 'sgd' (the --optimizer of this run)");
    }
    started_ = state.value("started", false);
  }

 private:
  float momentum_;
  float weight_decay_;
  bool started_ = false;
  std::vector<float> buf_;
};

class AdamW final : public Optimizer {
 public:
  AdamW(const OptimizerOptions& o, std::size_t n)
      : options_(o), exp_avg_(n, 0.0F), exp_avg_sq_(n, 0.0F) {}

  void step(std::span<float> params, std::span<const float> grads, double lr) override {
    check_size(exp_avg_.size(), params.size(), grads.size());
    ++step_;
    const double bc1 = 1.0 - std::pow(options_.beta1, static_cast<double>(step_));
    const double bc2 = 1.0 - std::pow(options_.beta2, static_cast<double>(step_));
    const auto b1 = static_cast<float>(options_.beta1);
    const auto b2 = static_cast<float>(options_.beta2);
    const auto step_size = static_cast<float>(lr / bc1);
    const auto inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
    const auto eps = static_cast<float>(options_.eps);
    const auto decay = static_cast<float>(1.0 - lr * options_.weight_decay);
    for (std::size_t i = 0; i < params.size(); ++i) {
      const float g = grads[i];
      exp_avg_[i] = b1 * exp_avg_[i] + (1.0F - b1) * g;
      exp_avg_sq_[i] = b2 * exp_avg_sq_[i] + (1.0F - b2) * g * g;
      const float denom = std::sqrt(exp_avg_sq_[i]) * inv_sqrt_bc2 + eps;
      params[i] = params[i] * decay - step_size * exp_avg_[i] / denom;
    }
  }
  std::vector<StateBuffer> state_buffers() override {
    return {{"optimizer.exp_avg", exp_avg_}, {"optimizer.exp_avg_sq", exp_avg_sq_}};
  }
  [[nodiscard]] nlohmann::json scalar_state() const override {
    return {{"name", "adamw"}, {"step", step_}};
  }
  void load_scalar_state(const nlohmann::json& state) override {
    if (state.value("name", "") != "adamw") {
      throw ConfigError("checkpoint holds optimizer state '" + state.value("name", "?") +
                        "', expected 'adamw' (the --optimizer of this run)");
    }
    step_ = state.value("step", int64_t{0});
  }

 private:
  OptimizerOptions options_;
  int64_t step_ = 0;
  std::vector<float> exp_avg_;
  std::vector<float> exp_avg_sq_;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& options, std::size_t num_params) {
  if (!(options.weight_decay >= 0.0)) {
    throw ConfigError("--weight_decay " + std::to_string(options.weight_decay) +
                      ": expected a value >= 0");
  }
  if (options.name == "sgd") {
    if (!(options.momentum >= 0.0 && options.momentum < 1.0)) {
      throw ConfigError("--momentum " + std::to_string(options.momentum) +
                        ": expected a value in [0, 1)");
    }
    return std::make_unique<Sgd>(options, num_params);
  }
  if (options.name == "adamw") {
    if (!(options.beta1 >= 0.0 && options.beta1 < 1.0 && options.beta2 >= 0.0 &&
          options.beta2 < 1.0 && options.eps > 0.0)) {
      throw ConfigError("AdamW betas (" + std::to_string(options.beta1) + ", " +
                        std::to_string(options.beta2) + ") and eps " + std::to_string(options.eps) +
                        ": expected betas in [0, 1) and eps > 0");
    }
    return std::make_unique<AdamW>(options, num_params);
  }
  throw ConfigError("--optimizer '" + options.name + "': expected 'sgd' or 'adamw'");
}

}  // namespace ddp::trainer
