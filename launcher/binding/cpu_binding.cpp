#include "launcher/binding/cpu_binding.hpp"

#include <linux/mempolicy.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

namespace ddp::launcher {

PreparedBinding::PreparedBinding(const CpuBinding& binding) {
  if (!binding.cpus.empty()) {
    int count = binding.cpus.back() + 1;
    cpus_ = CPU_ALLOC(count);
    cpus_size_ = CPU_ALLOC_SIZE(count);
    CPU_ZERO_S(cpus_size_, cpus_);
    for (int cpu : binding.cpus) CPU_SET_S(static_cast<size_t>(cpu), cpus_size_, cpus_);
  }
  if (!binding.mems.empty()) {
    constexpr size_t kBits = sizeof(unsigned long) * CHAR_BIT;  // NOLINT(google-runtime-int)
    nodes_.assign(static_cast<size_t>(binding.mems.back()) / kBits + 1, 0);
    for (int node : binding.mems) {
      nodes_[static_cast<size_t>(node) / kBits] |= 1UL << (static_cast<size_t>(node) % kBits);
    }
  }
}

PreparedBinding::~PreparedBinding() {
  if (cpus_ != nullptr) CPU_FREE(cpus_);
}

int PreparedBinding::apply(const char** what) const noexcept {
  if (cpus_ != nullptr && ::sched_setaffinity(0, cpus_size_, cpus_) != 0) {
    *what = "sched_setaffinity";
    return errno;
  }
  if (!nodes_.empty()) {
    // The kernel reads maxnode - 1 bits of the mask (numactl passes bits + 1 too).
    unsigned long maxnode = nodes_.size() * sizeof(unsigned long) * CHAR_BIT + 1;  // NOLINT
    if (::syscall(SYS_set_mempolicy, MPOL_BIND, nodes_.data(), maxnode) != 0) {
      *what = "set_mempolicy";
      return errno;
    }
  }
  return 0;
}

}  // namespace ddp::launcher
