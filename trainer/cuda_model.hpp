#pragma once
// The MLP on one CUDA device (built only with DDP_HAVE_CUDA): cuBLAS GEMMs, the small kernels
// of cuda_kernels.cu, the optimizer on the device. Gradients stay in device memory, where the
// NCCL process group reduces them on its own stream. Same layout, initialisation, checkpoint
// names and optimizer state format as the CPU model, so checkpoints move between the two.
#include <memory>

#include "trainer/model.hpp"

namespace ddp::trainer {

class CudaModel final : public Model {
 public:
  // Selects `device` and allocates; throws Error naming the device and CUDA/cuBLAS error.
  CudaModel(std::vector<std::size_t> sizes, const OptimizerOptions& optimizer, int device);
  ~CudaModel() override;

  [[nodiscard]] std::string device() const override;
  [[nodiscard]] const std::vector<LayerSlot>& layers() const override;
  [[nodiscard]] std::size_t num_parameters() const override;
  void init(uint64_t seed) override;
  BatchResult train_batch(std::span<const float> x, std::span<const int32_t> y,
                          const LayerReadyFn& on_layer_ready) override;
  BatchResult evaluate(std::span<const float> x, std::span<const int32_t> y) override;
  std::span<float> layer_gradients(std::size_t layer) override;
  void step(double lr) override;
  std::span<float> host_parameters() override;
  std::vector<StateBuffer> host_optimizer_buffers() override;
  void push_host_state() override;
  [[nodiscard]] nlohmann::json optimizer_scalar_state() const override;
  void load_optimizer_scalar_state(const nlohmann::json& state) override;

 private:
  struct Impl;
  BatchResult forward_and_loss(std::span<const float> x, std::span<const int32_t> y,
                               bool want_grad);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::trainer
