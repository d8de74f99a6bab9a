#include "trainer/mlp.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "common/error.hpp"
#include "trainer/rng.hpp"

namespace ddp::trainer {
namespace {

int as_int(std::size_t v) {
  return static_cast<int>(v);
}

}  // namespace

std::vector<LayerSlot> layout_layers(const std::vector<std::size_t>& sizes) {
  if (sizes.size() < 2) {
    throw ConfigError("an MLP needs at least an input and an output size, got " +
                      std::to_string(sizes.size()) + " size(s)");
  }
  std::vector<LayerSlot> layers;
  std::size_t offset = 0;
  for (std::size_t l = 0; l + 1 < sizes.size(); ++l) {
    if (sizes[l] == 0 || sizes[l + 1] == 0) {
      throw ConfigError("layer " + std::to_string(l) + " has a zero size (" +
                        std::to_string(sizes[l]) + " -> " + std::to_string(sizes[l + 1]) +
                        "), expected every size > 0");
    }
    layers.push_back({sizes[l], sizes[l + 1], offset});
    offset += layers.back().size();
  }
  return layers;
}

std::string weight_name(std::size_t layer) {
  return "layers." + std::to_string(layer) + ".weight";
}
std::string bias_name(std::size_t layer) {
  return "layers." + std::to_string(layer) + ".bias";
}

Mlp::Mlp(std::vector<std::size_t> sizes)
    : sizes_(std::move(sizes)), layers_(layout_layers(sizes_)), acts_(layers_.size() + 1) {
  const std::size_t total = layers_.back().offset + layers_.back().size();
  params_.assign(total, 0.0F);
  grads_.assign(total, 0.0F);
}

void Mlp::init(uint64_t seed) {
  Rng rng(seed);
  for (const LayerSlot& slot : layers_) {
    const double bound = std::sqrt(6.0 / static_cast<double>(slot.in));
    float* w = params_.data() + slot.offset;
    for (std::size_t i = 0; i < slot.out * slot.in; ++i) {
      w[i] = static_cast<float>(rng.uniform(-bound, bound));
    }
    std::fill_n(w + slot.out * slot.in, slot.out, 0.0F);
  }
}

std::span<float> Mlp::layer_gradients(std::size_t layer) {
  const LayerSlot& slot = layers_.at(layer);
  return std::span<float>(grads_).subspan(slot.offset, slot.size());
}

void Mlp::forward(const float* x, std::size_t n) {
  input_ = x;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const LayerSlot& s = layers_[l];
    const float* in = l == 0 ? x : acts_[l].data();
    std::vector<float>& out = acts_[l + 1];
    out.resize(n * s.out);
    const float* w = params_.data() + s.offset;
    const float* b = w + s.out * s.in;
    for (std::size_t r = 0; r < n; ++r) std::copy_n(b, s.out, out.data() + r * s.out);
    // out[n, out] += in[n, in] * W^T   (W is [out, in] row-major, as in torch.nn.Linear)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, as_int(n), as_int(s.out), as_int(s.in),
                1.0F, in, as_int(s.in), w, as_int(s.in), 1.0F, out.data(), as_int(s.out));
    if (l + 1 < layers_.size()) {
      for (float& v : out) v = std::max(v, 0.0F);
    }
  }
}

BatchResult Mlp::loss_and_logit_grad(std::span<const int32_t> y, bool want_grad) {
  const std::size_t n = y.size();
  const std::size_t c = classes();
  const float* logits = acts_.back().data();
  if (want_grad) delta_.resize(n * c);
  BatchResult result;
  result.count = static_cast<int64_t>(n);
  const float inv_n = 1.0F / static_cast<float>(n);
  for (std::size_t r = 0; r < n; ++r) {
    const float* z = logits + r * c;
    const auto best = static_cast<std::size_t>(std::max_element(z, z + c) - z);
    const float zmax = z[best];
    double sum = 0;
    for (std::size_t k = 0; k < c; ++k) sum += std::exp(static_cast<double>(z[k] - zmax));
    const auto label = static_cast<std::size_t>(y[r]);
    result.loss_sum += std::log(sum) - static_cast<double>(z[label] - zmax);
    result.correct += best == label ? 1 : 0;
    if (want_grad) {
      float* d = delta_.data() + r * c;
      for (std::size_t k = 0; k < c; ++k) {
        const double p = std::exp(static_cast<double>(z[k] - zmax)) / sum;
        d[k] = static_cast<float>(p) * inv_n;
      }
      d[label] -= inv_n;
    }
  }
  return result;
}

BatchResult Mlp::train_batch(std::span<const float> x, std::span<const int32_t> y,
                             const LayerReadyFn& on_layer_ready) {
  const std::size_t n = y.size();
  if (n == 0 || x.size() != n * input()) {
    throw ConfigError("train_batch: " + std::to_string(x.size()) + " features for " +
                      std::to_string(n) + " labels, expected " + std::to_string(input()) +
                      " per row and at least one row");
  }
  forward(x.data(), n);
  const BatchResult result = loss_and_logit_grad(y, /*want_grad=*/true);
  for (std::size_t l = layers_.size(); l-- > 0;) {
    const LayerSlot& s = layers_[l];
    const float* in = l == 0 ? input_ : acts_[l].data();
    float* gw = grads_.data() + s.offset;
    float* gb = gw + s.out * s.in;
    // dW[out, in] = delta^T[out, n] * in[n, in]
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, as_int(s.out), as_int(s.in), as_int(n),
                1.0F, delta_.data(), as_int(s.out), in, as_int(s.in), 0.0F, gw, as_int(s.in));
    std::fill_n(gb, s.out, 0.0F);
    for (std::size_t r = 0; r < n; ++r) {
      const float* d = delta_.data() + r * s.out;
      for (std::size_t k = 0; k < s.out; ++k) gb[k] += d[k];
    }
    // This layer is done: its all-reduce can start while the layers below are computed.
    if (on_layer_ready) on_layer_ready(l);
    if (l == 0) break;
    // delta_prev[n, in] = delta[n, out] * W[out, in], then through the ReLU of layer l-1.
    delta_prev_.resize(n * s.in);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, as_int(n), as_int(s.in), as_int(s.out),
                1.0F, delta_.data(), as_int(s.out), params_.data() + s.offset, as_int(s.in), 0.0F,
                delta_prev_.data(), as_int(s.in));
    // Branch-free select (not a conditional store) so the compiler vectorizes it.
    const float* act = acts_[l].data();
    float* dp = delta_prev_.data();
    for (std::size_t i = 0; i < delta_prev_.size(); ++i) dp[i] = act[i] > 0.0F ? dp[i] : 0.0F;
    delta_.swap(delta_prev_);
  }
  return result;
}

BatchResult Mlp::evaluate(std::span<const float> x, std::span<const int32_t> y) {
  const std::size_t n = y.size();
  if (n == 0) return {};
  if (x.size() != n * input()) {
    throw ConfigError("evaluate: " + std::to_string(x.size()) + " features for " +
                      std::to_string(n) + " labels, expected " + std::to_string(input()) +
                      " per row");
  }
  forward(x.data(), n);
  return loss_and_logit_grad(y, /*want_grad=*/false);
}

}  // namespace ddp::trainer
