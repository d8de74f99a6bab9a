#include "trainer/model.hpp"

#include "common/error.hpp"
#ifdef DDP_HAVE_CUDA
#include "trainer/cuda_model.hpp"
#endif

namespace ddp::trainer {

CpuModel::CpuModel(std::vector<std::size_t> sizes, const OptimizerOptions& optimizer)
    : mlp_(std::move(sizes)), optimizer_(make_optimizer(optimizer, mlp_.parameters().size())) {}

std::unique_ptr<Model> make_model(bool use_cuda, int local_rank, std::vector<std::size_t> sizes,
                                  const OptimizerOptions& optimizer) {
  if (!use_cuda) return std::make_unique<CpuModel>(std::move(sizes), optimizer);
#ifdef DDP_HAVE_CUDA
  return std::make_unique<CudaModel>(std::move(sizes), optimizer, local_rank);
#else
  throw ConfigError("a GPU model on device " + std::to_string(local_rank) +
                    " was requested (backend nccl), but this build has no CUDA: rebuild where "
                    "the CUDA Toolkit and NCCL are found, or use --backend gloo");
#endif
}

}  // namespace ddp::trainer
