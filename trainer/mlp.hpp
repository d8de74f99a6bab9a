#pragma once
// The CPU multi-layer perceptron: Linear layers (PyTorch layout, weight [out, in]) with ReLU
// between them and softmax cross-entropy on top. GEMMs go through cblas (OpenBLAS).
// All parameters live in one flat buffer (layer by layer, each layer's weight then bias), and
// the gradients in another with the same layout, so a layer's gradients are one contiguous span
// the gradient bucketer can reduce while backward works on the layers below.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace ddp::trainer {

// Loss and accuracy of one batch, as sums so they can be reduced across ranks.
struct BatchResult {
  double loss_sum = 0;  // sum over rows of the cross-entropy
  int64_t correct = 0;  // rows whose arg-max equals the label
  int64_t count = 0;    // rows
};

// Where one Linear layer sits in the flat buffers.
struct LayerSlot {
  std::size_t in = 0;
  std::size_t out = 0;
  std::size_t offset = 0;  // weight at [offset, offset + out*in), bias right after it
  [[nodiscard]] std::size_t size() const { return out * in + out; }
};

// sizes = {input, hidden..., classes}; ConfigError unless >= 2 sizes, all > 0.
std::vector<LayerSlot> layout_layers(const std::vector<std::size_t>& sizes);

// Called with a layer index as soon as that layer's gradients are final (last layer first).
using LayerReadyFn = std::function<void(std::size_t layer)>;

class Mlp {
 public:
  explicit Mlp(std::vector<std::size_t> sizes);

  // He-uniform weights (bound sqrt(6 / in), suited to ReLU), zero biases: the same seed gives
  // bit-identical parameters on every rank.
  void init(uint64_t seed);

  // Forward, loss (mean over the n rows) and backward: gradients() is overwritten with the
  // gradient of the mean loss. x holds n * input() floats, y n labels in [0, classes()).
  BatchResult train_batch(std::span<const float> x, std::span<const int32_t> y,
                          const LayerReadyFn& on_layer_ready = {});
  // Forward and loss only; parameters and gradients are untouched.
  BatchResult evaluate(std::span<const float> x, std::span<const int32_t> y);

  [[nodiscard]] const std::vector<std::size_t>& sizes() const { return sizes_; }
  [[nodiscard]] std::size_t input() const { return sizes_.front(); }
  [[nodiscard]] std::size_t classes() const { return sizes_.back(); }
  [[nodiscard]] const std::vector<LayerSlot>& layers() const { return layers_; }
  [[nodiscard]] std::span<float> parameters() { return params_; }
  [[nodiscard]] std::span<const float> parameters() const { return params_; }
  [[nodiscard]] std::span<float> gradients() { return grads_; }
  // Weight and bias gradients of one layer, contiguous.
  [[nodiscard]] std::span<float> layer_gradients(std::size_t layer);

 private:
  // Fills logits_ (and the activations) for n rows.
  void forward(const float* x, std::size_t n);
  BatchResult loss_and_logit_grad(std::span<const int32_t> y, bool want_grad);

  std::vector<std::size_t> sizes_;
  std::vector<LayerSlot> layers_;
  std::vector<float> params_;
  std::vector<float> grads_;
  // acts_[l] = input of layer l (acts_[0] aliases nothing: x is read in place); acts_.back()
  // holds the logits. Reused across batches.
  std::vector<std::vector<float>> acts_;
  std::vector<float> delta_;
  std::vector<float> delta_prev_;
  const float* input_ = nullptr;
};

// "layers.<l>.weight" / "layers.<l>.bias": the names used in checkpoints and --out files.
std::string weight_name(std::size_t layer);
std::string bias_name(std::size_t layer);

}  // namespace ddp::trainer
