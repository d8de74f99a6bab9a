#pragma once
// --cpu_bind: the CPUs of each local rank, given explicitly (docs/binding.md):
//   map_cpu:0,4,8,12   one CPU per local rank (srun's --cpu-bind=map_cpu)
//   mask_cpu:0x3,0xc   one hexadecimal CPU mask per local rank (srun's mask_cpu)
//   0-3:4-7            a CPU list per local rank ("0-3,8" syntax), ranks separated by ':'
#include <string>
#include <vector>

#include "launcher/binding/cpu_binding.hpp"
#include "launcher/binding/topology.hpp"

namespace ddp::launcher {

// The sorted CPUs of each of nproc local ranks. ConfigError naming the value when it is
// malformed, does not give exactly nproc entries, or gives two ranks the same CPU.
std::vector<std::vector<int>> parse_cpu_bind(const std::string& value, int nproc);
// The bindings for those lists on this machine: ConfigError naming the value when a CPU does
// not exist in topology or is outside allowed (the CPUs this process may use: a cgroup,
// taskset or an srun step can narrow them). Memory stays unbound (srun's --cpu-bind does
// not bind memory either).
std::vector<CpuBinding> cpu_bind_bindings(const std::string& value,
                                          const std::vector<std::vector<int>>& per_rank,
                                          const Topology& topology,
                                          const std::vector<int>& allowed);

}  // namespace ddp::launcher
