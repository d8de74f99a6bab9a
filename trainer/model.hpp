#pragma once
// What the training loop needs from a model, whichever device it lives on: batches in,
// per-layer gradient buffers for the bucketer, the optimizer step, and host views of the
// parameters and optimizer state for checkpoints and consistency checks.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "trainer/mlp.hpp"
#include "trainer/optimizer.hpp"

namespace ddp::trainer {

class Model {
 public:
  virtual ~Model() = default;
  Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // "cpu" or "cuda:<device>".
  [[nodiscard]] virtual std::string device() const = 0;
  [[nodiscard]] virtual const std::vector<LayerSlot>& layers() const = 0;
  [[nodiscard]] virtual std::size_t num_parameters() const = 0;
  // Seeded initialisation, bit-identical on every rank (Mlp::init's rule on every device).
  virtual void init(uint64_t seed) = 0;
  // Forward, mean loss, backward (host batch in); on_layer_ready(l) once layer l's gradients
  // are final in layer_gradients(l).
  virtual BatchResult train_batch(std::span<const float> x, std::span<const int32_t> y,
                                  const LayerReadyFn& on_layer_ready) = 0;
  // Forward and loss only.
  virtual BatchResult evaluate(std::span<const float> x, std::span<const int32_t> y) = 0;
  // One layer's weight+bias gradients where the model keeps them (device memory on a GPU):
  // the buffers the gradient bucketer reduces.
  virtual std::span<float> layer_gradients(std::size_t layer) = 0;
  // One optimizer update with the (already averaged) gradients.
  virtual void step(double lr) = 0;

  // Host copies of parameters / optimizer buffers, current as of the call. Writing into them
  // and then calling push_host_state() loads them into the model (resume).
  virtual std::span<float> host_parameters() = 0;
  virtual std::vector<StateBuffer> host_optimizer_buffers() = 0;
  virtual void push_host_state() = 0;
  [[nodiscard]] virtual nlohmann::json optimizer_scalar_state() const = 0;
  virtual void load_optimizer_scalar_state(const nlohmann::json& state) = 0;
};

// The OpenBLAS model (Mlp) with a host optimizer.
class CpuModel final : public Model {
 public:
  CpuModel(std::vector<std::size_t> sizes, const OptimizerOptions& optimizer);
  [[nodiscard]] std::string device() const override { return "cpu"; }
  [[nodiscard]] const std::vector<LayerSlot>& layers() const override { return mlp_.layers(); }
  [[nodiscard]] std::size_t num_parameters() const override { return mlp_.parameters().size(); }
  void init(uint64_t seed) override { mlp_.init(seed); }
  BatchResult train_batch(std::span<const float> x, std::span<const int32_t> y,
                          const LayerReadyFn& on_layer_ready) override {
    return mlp_.train_batch(x, y, on_layer_ready);
  }
  BatchResult evaluate(std::span<const float> x, std::span<const int32_t> y) override {
    return mlp_.evaluate(x, y);
  }
  std::span<float> layer_gradients(std::size_t layer) override {
    return mlp_.layer_gradients(layer);
  }
  void step(double lr) override { optimizer_->step(mlp_.parameters(), mlp_.gradients(), lr); }
  std::span<float> host_parameters() override { return mlp_.parameters(); }
  std::vector<StateBuffer> host_optimizer_buffers() override { return optimizer_->state_buffers(); }
  void push_host_state() override {}  // the host buffers are the model's own
  [[nodiscard]] nlohmann::json optimizer_scalar_state() const override {
    return optimizer_->scalar_state();
  }
  void load_optimizer_scalar_state(const nlohmann::json& state) override {
    optimizer_->load_scalar_state(state);
  }

 private:
  Mlp mlp_;
  std::unique_ptr<Optimizer> optimizer_;
};

// The CUDA model on device local_rank when use_cuda, else the CPU model. ConfigError for
// use_cuda in a build without CUDA.
std::unique_ptr<Model> make_model(bool use_cuda, int local_rank, std::vector<std::size_t> sizes,
                                  const OptimizerOptions& optimizer);

}  // namespace ddp::trainer
