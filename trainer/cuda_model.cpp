#include "trainer/cuda_model.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>

#include "common/error.hpp"
#include "trainer/cuda_kernels.hpp"

namespace ddp::trainer {
namespace {

void check(cudaError_t err, const char* what, int device) {
  if (err != cudaSuccess) {
    throw Error(std::string("CUDA ") + what + " on device " + std::to_string(device) + ": " +
                cudaGetErrorString(err));
  }
}

void check(cublasStatus_t status, const char* what, int device) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw Error(std::string("cuBLAS ") + what + " on device " + std::to_string(device) +
                ": status " + std::to_string(static_cast<int>(status)));
  }
}

void check_launch(const char* what, int device) {
  const std::string err = cuda::last_error();
  if (!err.empty()) {
    throw Error(std::string("CUDA kernel ") + what + " on device " + std::to_string(device) + ": " +
                err);
  }
}

// Device memory that grows on demand and is freed with its owner.
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  ~DeviceArray() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), capacity_(std::exchange(other.capacity_, 0)) {}

  // Ensures room for n elements (contents are not kept when it grows).
  void reserve(std::size_t n, int device) {
    if (n <= capacity_) return;
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    void* raw = nullptr;
    check(cudaMalloc(&raw, n * sizeof(T)), "cudaMalloc", device);
    ptr_ = static_cast<T*>(raw);
    capacity_ = n;
  }
  [[nodiscard]] T* get() const { return ptr_; }
  void swap(DeviceArray& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(capacity_, other.capacity_);
  }

 private:
  T* ptr_ = nullptr;
  std::size_t capacity_ = 0;
};

int as_int(std::size_t v) {
  return static_cast<int>(v);
}

}  // namespace

struct CudaModel::Impl {
  int device = 0;
  std::vector<std::size_t> sizes;
  std::vector<LayerSlot> layers;
  std::size_t total = 0;
  OptimizerOptions optimizer;
  int64_t adam_step = 0;
  bool sgd_started = false;
  cublasHandle_t cublas = nullptr;

  DeviceArray<float> params;
  DeviceArray<float> grads;
  DeviceArray<float> state_a;            // AdamW exp_avg, or SGD momentum
  DeviceArray<float> state_b;            // AdamW exp_avg_sq
  std::vector<DeviceArray<float>> acts;  // acts[0] = input batch, acts[l + 1] = layer l output
  DeviceArray<float> delta;
  DeviceArray<float> delta_prev;
  DeviceArray<int32_t> labels;
  DeviceArray<float> row_loss;
  DeviceArray<int32_t> row_correct;

  std::vector<float> host_params;
  std::vector<float> host_a;
  std::vector<float> host_b;
  std::vector<float> host_row_loss;
  std::vector<int32_t> host_row_correct;

  [[nodiscard]] bool adamw() const { return optimizer.name == "adamw"; }
  void to_host(std::vector<float>& dst, const DeviceArray<float>& src) const {
    dst.resize(total);
    check(cudaMemcpy(dst.data(), src.get(), total * sizeof(float), cudaMemcpyDeviceToHost),
          "copy to host", device);
  }
  void to_device(DeviceArray<float>& dst, const std::vector<float>& src) const {
    check(cudaMemcpy(dst.get(), src.data(), total * sizeof(float), cudaMemcpyHostToDevice),
          "copy to device", device);
  }
};

CudaModel::CudaModel(std::vector<std::size_t> sizes, const OptimizerOptions& optimizer, int device)
    : impl_(std::make_unique<Impl>()) {
  make_optimizer(optimizer, 1);  // validates the name and hyper-parameters like the CPU path
  Impl& m = *impl_;
  m.device = device;
  m.layers = layout_layers(sizes);
  m.sizes = std::move(sizes);
  m.total = m.layers.back().offset + m.layers.back().size();
  m.optimizer = optimizer;
  check(cudaSetDevice(device), "cudaSetDevice", device);
  check(cublasCreate(&m.cublas), "cublasCreate", device);
  for (DeviceArray<float>* a : {&m.params, &m.grads, &m.state_a, &m.state_b}) {
    a->reserve(m.total, device);
    check(cudaMemset(a->get(), 0, m.total * sizeof(float)), "cudaMemset", device);
  }
  m.acts.resize(m.layers.size() + 1);
}

CudaModel::~CudaModel() {
  if (impl_->cublas != nullptr) cublasDestroy(impl_->cublas);
}

std::string CudaModel::device() const {
  return "cuda:" + std::to_string(impl_->device);
}
const std::vector<LayerSlot>& CudaModel::layers() const {
  return impl_->layers;
}
std::size_t CudaModel::num_parameters() const {
  return impl_->total;
}

void CudaModel::init(uint64_t seed) {
  // The CPU model's initialisation, copied over: identical bits on every rank and device.
  Mlp host(impl_->sizes);
  host.init(seed);
  impl_->host_params.assign(host.parameters().begin(), host.parameters().end());
  impl_->to_device(impl_->params, impl_->host_params);
}

BatchResult CudaModel::forward_and_loss(std::span<const float> x, std::span<const int32_t> y,
                                        bool want_grad) {
  Impl& m = *impl_;
  const std::size_t n = y.size();
  const std::size_t in0 = m.sizes.front();
  if (n == 0 || x.size() != n * in0) {
    throw ConfigError("CudaModel: " + std::to_string(x.size()) + " features for " +
                      std::to_string(n) + " labels, expected " + std::to_string(in0) +
                      " per row and at least one row");
  }
  m.acts[0].reserve(x.size(), m.device);
  check(cudaMemcpy(m.acts[0].get(), x.data(), x.size_bytes(), cudaMemcpyHostToDevice), "copy batch",
        m.device);
  m.labels.reserve(n, m.device);
  check(cudaMemcpy(m.labels.get(), y.data(), y.size_bytes(), cudaMemcpyHostToDevice), "copy labels",
        m.device);
  const float one = 1.0F;
  const float zero = 0.0F;
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    const LayerSlot& s = m.layers[l];
    m.acts[l + 1].reserve(n * s.out, m.device);
    const float* w = m.params.get() + s.offset;
    // Row-major out[n, out] = in[n, in] * W^T is column-major out^T = W(op T) * in^T.
    check(cublasSgemm(m.cublas, CUBLAS_OP_T, CUBLAS_OP_N, as_int(s.out), as_int(n), as_int(s.in),
                      &one, w, as_int(s.in), m.acts[l].get(), as_int(s.in), &zero,
                      m.acts[l + 1].get(), as_int(s.out)),
          "forward sgemm", m.device);
    cuda::bias_activation(m.acts[l + 1].get(), w + s.out * s.in, as_int(n), as_int(s.out),
                          l + 1 < m.layers.size());
  }
  const std::size_t c = m.sizes.back();
  m.row_loss.reserve(n, m.device);
  m.row_correct.reserve(n, m.device);
  if (want_grad) m.delta.reserve(n * c, m.device);
  cuda::softmax_cross_entropy(m.acts.back().get(), m.labels.get(), as_int(n), as_int(c),
                              1.0F / static_cast<float>(n), want_grad ? m.delta.get() : nullptr,
                              m.row_loss.get(), m.row_correct.get());
  check_launch("softmax_cross_entropy", m.device);
  m.host_row_loss.resize(n);
  m.host_row_correct.resize(n);
  check(cudaMemcpy(m.host_row_loss.data(), m.row_loss.get(), n * sizeof(float),
                   cudaMemcpyDeviceToHost),
        "copy loss", m.device);
  check(cudaMemcpy(m.host_row_correct.data(), m.row_correct.get(), n * sizeof(int32_t),
                   cudaMemcpyDeviceToHost),
        "copy accuracy", m.device);
  BatchResult r;
  r.count = static_cast<int64_t>(n);
  for (std::size_t i = 0; i < n; ++i) {
    r.loss_sum += static_cast<double>(m.host_row_loss[i]);
    r.correct += m.host_row_correct[i];
  }
  return r;
}

BatchResult CudaModel::train_batch(std::span<const float> x, std::span<const int32_t> y,
                                   const LayerReadyFn& on_layer_ready) {
  const BatchResult r = forward_and_loss(x, y, /*want_grad=*/true);
  Impl& m = *impl_;
  const std::size_t n = y.size();
  const float one = 1.0F;
  const float zero = 0.0F;
  for (std::size_t l = m.layers.size(); l-- > 0;) {
    const LayerSlot& s = m.layers[l];
    float* gw = m.grads.get() + s.offset;
    // Row-major dW[out, in] = delta^T * in is column-major dW^T = in^T * delta(op T).
    check(cublasSgemm(m.cublas, CUBLAS_OP_N, CUBLAS_OP_T, as_int(s.in), as_int(s.out), as_int(n),
                      &one, m.acts[l].get(), as_int(s.in), m.delta.get(), as_int(s.out), &zero, gw,
                      as_int(s.in)),
          "weight-gradient sgemm", m.device);
    cuda::bias_gradient(m.delta.get(), as_int(n), as_int(s.out), gw + s.out * s.in);
    check_launch("bias_gradient", m.device);
    // Enqueued on the default stream; the NCCL stream (blocking) runs after it.
    if (on_layer_ready) on_layer_ready(l);
    if (l == 0) break;
    m.delta_prev.reserve(n * s.in, m.device);
    // Row-major delta_prev[n, in] = delta * W is column-major delta_prev^T = W^T * delta^T.
    check(cublasSgemm(m.cublas, CUBLAS_OP_N, CUBLAS_OP_N, as_int(s.in), as_int(n), as_int(s.out),
                      &one, m.params.get() + s.offset, as_int(s.in), m.delta.get(), as_int(s.out),
                      &zero, m.delta_prev.get(), as_int(s.in)),
          "input-gradient sgemm", m.device);
    cuda::relu_backward(m.delta_prev.get(), m.acts[l].get(), n * s.in);
    check_launch("relu_backward", m.device);
    m.delta.swap(m.delta_prev);
  }
  return r;
}

BatchResult CudaModel::evaluate(std::span<const float> x, std::span<const int32_t> y) {
  if (y.empty()) return {};
  return forward_and_loss(x, y, /*want_grad=*/false);
}

std::span<float> CudaModel::layer_gradients(std::size_t layer) {
  const LayerSlot& s = impl_->layers.at(layer);
  return {impl_->grads.get() + s.offset, s.size()};
}

void CudaModel::step(double lr) {
  Impl& m = *impl_;
  const OptimizerOptions& o = m.optimizer;
  if (m.adamw()) {
    ++m.adam_step;
    const double bc1 = 1.0 - std::pow(o.beta1, static_cast<double>(m.adam_step));
    const double bc2 = 1.0 - std::pow(o.beta2, static_cast<double>(m.adam_step));
    cuda::adamw_step(m.params.get(), m.grads.get(), m.state_a.get(), m.state_b.get(), m.total,
                     static_cast<float>(lr / bc1), static_cast<float>(1.0 / std::sqrt(bc2)),
                     static_cast<float>(o.beta1), static_cast<float>(o.beta2),
                     static_cast<float>(o.eps), static_cast<float>(1.0 - lr * o.weight_decay));
  } else {
    cuda::sgd_step(m.params.get(), m.grads.get(), m.state_a.get(), m.total, static_cast<float>(lr),
                   static_cast<float>(o.momentum), static_cast<float>(o.weight_decay),
                   !m.sgd_started);
    m.sgd_started = true;
  }
  check_launch("optimizer step", m.device);
}

std::span<float> CudaModel::host_parameters() {
  impl_->to_host(impl_->host_params, impl_->params);
  return impl_->host_params;
}

std::vector<StateBuffer> CudaModel::host_optimizer_buffers() {
  Impl& m = *impl_;
  m.to_host(m.host_a, m.state_a);
  if (!m.adamw()) return {{"optimizer.momentum", m.host_a}};
  m.to_host(m.host_b, m.state_b);
  return {{"optimizer.exp_avg", m.host_a}, {"optimizer.exp_avg_sq", m.host_b}};
}

void CudaModel::push_host_state() {
  Impl& m = *impl_;
  if (m.host_params.size() == m.total) m.to_device(m.params, m.host_params);
  if (m.host_a.size() == m.total) m.to_device(m.state_a, m.host_a);
  if (m.host_b.size() == m.total) m.to_device(m.state_b, m.host_b);
}

nlohmann::json CudaModel::optimizer_scalar_state() const {
  // The CPU optimizers' format (optimizer.cpp), so checkpoints move between devices.
  if (impl_->adamw()) return {{"name", "adamw"}, {"step", impl_->adam_step}};
  return {{"name", "sgd"}, {"started", impl_->sgd_started}};
}

void CudaModel::load_optimizer_scalar_state(const nlohmann::json& state) {
  const std::string name = state.value("name", "?");
  if (name != impl_->optimizer.name) {
    throw ConfigError("checkpoint holds optimizer state '" + name + "', expected '" +
                      impl_->optimizer.name + "' (the --optimizer of this run)");
  }
  impl_->adam_step = state.value("step", int64_t{0});
  impl_->sgd_started = state.value("started", false);
}

}  // namespace ddp::trainer
