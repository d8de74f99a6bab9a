#pragma once
// CpuBinding: the CPUs and NUMA memory nodes one worker is bound to, and how a freshly
// forked worker applies it to itself before exec (the binding is inherited across exec, so
// the program never runs unbound: no race with threads it starts).
#include <sched.h>

#include <memory>
#include <string>
#include <vector>

namespace ddp::launcher {

struct CpuBinding {
  std::vector<int> cpus;  // sorted; empty: CPUs not bound
  std::vector<int> mems;  // sorted; empty: memory policy not changed
  std::string reason;     // what chose it, for the log line: "--numa_binding=node, GPU 3"

  [[nodiscard]] bool empty() const { return cpus.empty() && mems.empty(); }
};

// A CpuBinding laid out as the kernel takes it (a CPU set and a node mask), built before
// fork() so that apply() does no allocation.
class PreparedBinding {
 public:
  explicit PreparedBinding(const CpuBinding& binding);
  ~PreparedBinding();
  PreparedBinding(const PreparedBinding&) = delete;
  PreparedBinding& operator=(const PreparedBinding&) = delete;

  // In the child between fork() and exec (async-signal-safe): sched_setaffinity and
  // set_mempolicy(MPOL_BIND). Returns 0, or the errno of the call that failed with
  // *what naming it ("sched_setaffinity" / "set_mempolicy").
  int apply(const char** what) const noexcept;

 private:
  cpu_set_t* cpus_ = nullptr;
  size_t cpus_size_ = 0;
  std::vector<unsigned long> nodes_;  // NOLINT(google-runtime-int): the kernel's nodemask type
};

}  // namespace ddp::launcher
