#pragma once
// The binding of each local rank, from --numa_binding or --cpu_bind and what this machine
// looks like; resolved once before the first worker starts (docs/binding.md).
#include <string>
#include <vector>

#include "launcher/binding/cpu_binding.hpp"
#include "launcher/binding/gpu_locality.hpp"
#include "launcher/binding/topology.hpp"
#include "launcher/config/launch_config.hpp"

namespace ddp::launcher {

// What the binding rules need to know about the machine; tests build one from a synthetic
// topology and a table of GPUs.
struct MachineLayout {
  Topology topology;
  std::vector<int> allowed;   // CPUs this process may use (sched_getaffinity), sorted
  std::vector<GpuInfo> gpus;  // the GPUs workers see, in CUDA order
  bool numa_memory = true;    // the kernel has memory policies (a NUMA kernel); else CPUs only
  // NUMA nodes whose memory this process may use (its cpuset's Mems_allowed_list); memory is
  // bound only within them. Empty: no limit known.
  std::vector<int> allowed_mems;
};

// This machine: hwloc, sched_getaffinity, probe_gpus as CUDA_VISIBLE_DEVICES orders
// it. Throws Error when hwloc cannot read the topology.
MachineLayout probe_machine_layout(const Environment& env);
// One binding per local rank (index = local rank), or none when neither option was given.
// ConfigError naming the option and value when the machine cannot honour it.
std::vector<CpuBinding> resolve_worker_bindings(const LaunchConfig& config,
                                                const MachineLayout& machine);
// The one log line per worker: "local rank 1: CPUs 16-31 (NUMA node 1), memory bound to
// NUMA node 1 [--numa_binding=node, GPU 1]".
std::string describe_binding(int local_rank, const CpuBinding& binding, const Topology& topology);

}  // namespace ddp::launcher
