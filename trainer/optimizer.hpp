#pragma once
// Optimizers over one flat parameter buffer: SGD with momentum (PyTorch's torch.optim.SGD
// semantics, weight decay added to the gradient) and AdamW (decoupled weight decay).
// Their state is exposed as named buffers plus a JSON scalar part so checkpoints can hold it.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

namespace ddp::trainer {

struct OptimizerOptions {
  std::string name = "adamw";  // "adamw" or "sgd"
  double momentum = 0.9;       // sgd
  double weight_decay = 0.0;   // sgd: L2 added to the gradient; adamw: decoupled
  double beta1 = 0.9;          // adamw
  double beta2 = 0.999;        // adamw
  double eps = 1e-8;           // adamw
};

// A named state buffer, as long as the parameters (e.g. "optimizer.exp_avg").
struct StateBuffer {
  std::string name;
  std::span<float> data;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of params with grads (same length as at construction) at learning rate lr.
  virtual void step(std::span<float> params, std::span<const float> grads, double lr) = 0;
  // Buffers to checkpoint and restore (restore by writing into them).
  virtual std::vector<StateBuffer> state_buffers() = 0;
  // Scalar state (e.g. Adam's step count) and its restore.
  [[nodiscard]] virtual nlohmann::json scalar_state() const = 0;
  virtual void load_scalar_state(const nlohmann::json& state) = 0;
};

// ConfigError naming the value for an unknown name or out-of-range hyper-parameters.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& options, std::size_t num_params);

}  // namespace ddp::trainer
