#pragma once
// The GPU MLP's small kernels behind plain host functions, so only cuda_kernels.cu needs
// nvcc. Everything is enqueued on the legacy default stream: the NCCL process group's own
// stream is created blocking, so it is ordered after these kernels without explicit events.
#include <cstddef>
#include <cstdint>

namespace ddp::trainer::cuda {

// out[r, k] = act(out[r, k] + bias[k]); act = ReLU when relu, identity otherwise.
void bias_activation(float* out, const float* bias, int rows, int cols, bool relu);
// Per row: cross-entropy loss and arg-max hit; when delta != nullptr also the logit gradient
// of the mean loss ((softmax - onehot) * inv_n).
void softmax_cross_entropy(const float* logits, const int32_t* labels, int rows, int classes,
                           float inv_n, float* delta, float* row_loss, int32_t* row_correct);
// delta[i] = 0 where the forward activation act[i] <= 0.
void relu_backward(float* delta, const float* act, std::size_t count);
// grad_bias[k] = sum over rows of delta[r, k].
void bias_gradient(const float* delta, int rows, int cols, float* grad_bias);
// AdamW update (same arithmetic as the CPU AdamW in optimizer.cpp).
void adamw_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::size_t n,
                float step_size, float inv_sqrt_bc2, float beta1, float beta2, float eps,
                float decay);
// SGD with momentum (torch.optim.SGD's rule; `first` seeds the buffer with the gradient).
void sgd_step(float* params, const float* grads, float* buf, std::size_t n, float lr,
              float momentum, float weight_decay, bool first);
// The last launch's error as text, "" when none (cudaGetLastError).
const char* last_error();

}  // namespace ddp::trainer::cuda
