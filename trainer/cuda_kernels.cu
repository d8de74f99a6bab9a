// Kernels of the GPU MLP (see cuda_kernels.hpp). One thread per element, or per row for the
// loss (an MLP's class count is small), so no shared-memory tuning is needed at these sizes.
#include <cuda_runtime.h>

#include "trainer/cuda_kernels.hpp"

namespace ddp::trainer::cuda {
namespace {

constexpr int kThreads = 256;

int blocks_for(std::size_t n) {
  return static_cast<int>((n + kThreads - 1) / kThreads);
}

__global__ void bias_activation_kernel(float* out, const float* bias, int rows, int cols,
                                       bool relu) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<std::size_t>(rows) * cols) return;
  const float v = out[i] + bias[i % cols];
  out[i] = relu ? fmaxf(v, 0.0f) : v;
}

__global__ void softmax_cross_entropy_kernel(const float* logits, const int32_t* labels, int rows,
                                             int classes, float inv_n, float* delta,
                                             float* row_loss, int32_t* row_correct) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* z = logits + static_cast<std::size_t>(r) * classes;
  int best = 0;
  for (int k = 1; k < classes; ++k) {
    if (z[k] > z[best]) best = k;
  }
  const float zmax = z[best];
  double sum = 0;
  for (int k = 0; k < classes; ++k) sum += exp(static_cast<double>(z[k] - zmax));
  const int label = labels[r];
  row_loss[r] = static_cast<float>(log(sum) - static_cast<double>(z[label] - zmax));
  row_correct[r] = best == label ? 1 : 0;
  if (delta != nullptr) {
    float* d = delta + static_cast<std::size_t>(r) * classes;
    for (int k = 0; k < classes; ++k) {
      d[k] = static_cast<float>(exp(static_cast<double>(z[k] - zmax)) / sum) * inv_n;
    }
    d[label] -= inv_n;
  }
}

__global__ void relu_backward_kernel(float* delta, const float* act, std::size_t count) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < count && act[i] <= 0.0f) delta[i] = 0.0f;
}

__global__ void bias_gradient_kernel(const float* delta, int rows, int cols, float* grad_bias) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= cols) return;
  float sum = 0.0f;
  for (int r = 0; r < rows; ++r) sum += delta[static_cast<std::size_t>(r) * cols + k];
  grad_bias[k] = sum;
}

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, std::size_t n,
                             float step_size, float inv_sqrt_bc2, float b1, float b2, float eps,
                             float decay) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float gi = g[i];
  m[i] = b1 * m[i] + (1.0f - b1) * gi;
  v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
  const float denom = sqrtf(v[i]) * inv_sqrt_bc2 + eps;
  p[i] = p[i] * decay - step_size * m[i] / denom;
}

__global__ void sgd_kernel(float* p, const float* g, float* buf, std::size_t n, float lr,
                           float momentum, float weight_decay, bool first) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float gi = g[i] + weight_decay * p[i];
  if (momentum != 0.0f) {
    buf[i] = first ? gi : momentum * buf[i] + gi;
    p[i] -= lr * buf[i];
  } else {
    p[i] -= lr * gi;
  }
}

}  // namespace

void bias_activation(float* out, const float* bias, int rows, int cols, bool relu) {
  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  bias_activation_kernel<<<blocks_for(n), kThreads>>>(out, bias, rows, cols, relu);
}

void softmax_cross_entropy(const float* logits, const int32_t* labels, int rows, int classes,
                           float inv_n, float* delta, float* row_loss, int32_t* row_correct) {
  softmax_cross_entropy_kernel<<<blocks_for(static_cast<std::size_t>(rows)), kThreads>>>(
      logits, labels, rows, classes, inv_n, delta, row_loss, row_correct);
}

void relu_backward(float* delta, const float* act, std::size_t count) {
  relu_backward_kernel<<<blocks_for(count), kThreads>>>(delta, act, count);
}

void bias_gradient(const float* delta, int rows, int cols, float* grad_bias) {
  bias_gradient_kernel<<<blocks_for(static_cast<std::size_t>(cols)), kThreads>>>(delta, rows, cols,
                                                                                 grad_bias);
}

void adamw_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::size_t n,
                float step_size, float inv_sqrt_bc2, float beta1, float beta2, float eps,
                float decay) {
  adamw_kernel<<<blocks_for(n), kThreads>>>(params, grads, exp_avg, exp_avg_sq, n, step_size,
                                            inv_sqrt_bc2, beta1, beta2, eps, decay);
}

void sgd_step(float* params, const float* grads, float* buf, std::size_t n, float lr,
              float momentum, float weight_decay, bool first) {
  sgd_kernel<<<blocks_for(n), kThreads>>>(params, grads, buf, n, lr, momentum, weight_decay, first);
}

const char* last_error() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? "" : cudaGetErrorString(err);
}

}  // namespace ddp::trainer::cuda
