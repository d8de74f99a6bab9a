#include "launcher/process/worker_binding.hpp"

#include <sched.h>

#include <filesystem>
#include <fstream>

#include "common/error.hpp"
#include "launcher/binding/cpu_bind_option.hpp"
#include "launcher/binding/cpu_list.hpp"
#include "launcher/binding/numa_binding.hpp"

namespace ddp::launcher {
namespace {

std::vector<int> allowed_cpus(const Topology& topology) {
  std::vector<int> cpus;
  int count = topology.pus.empty() ? 1 : topology.pus.back().cpu + 1;
  cpu_set_t* set = CPU_ALLOC(count);
  size_t size = CPU_ALLOC_SIZE(count);
  CPU_ZERO_S(size, set);
  if (::sched_getaffinity(0, size, set) == 0) {
    for (const auto& pu : topology.pus) {
      if (CPU_ISSET_S(static_cast<size_t>(pu.cpu), size, set)) cpus.push_back(pu.cpu);
    }
  } else {
    cpus = topology.cpus();
  }
  CPU_FREE(set);
  return cpus;
}

std::string node_list(const std::vector<int>& nodes) {
  return (nodes.size() == 1 ? "NUMA node " : "NUMA nodes ") + format_cpu_list(nodes);
}

std::vector<int> allowed_mems() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (!line.starts_with("Mems_allowed_list:")) continue;
    auto start = line.find_first_not_of(" \t", 18);
    if (start == std::string::npos) return {};
    return parse_cpu_list(line.substr(start)).value_or(std::vector<int>{});
  }
  return {};
}

}  // namespace

MachineLayout probe_machine_layout(const Environment& env) {
  MachineLayout machine;
  machine.topology = load_topology();
  machine.allowed = allowed_cpus(machine.topology);
  machine.gpus = visible_gpus(probe_gpus(), env);
  std::error_code ec;
  machine.numa_memory = std::filesystem::exists("/sys/devices/system/node/node0", ec);
  machine.allowed_mems = allowed_mems();
  return machine;
}

std::vector<CpuBinding> resolve_worker_bindings(const LaunchConfig& config,
                                                const MachineLayout& machine) {
  if (config.cpu_bind) {
    return cpu_bind_bindings(*config.cpu_bind, config.cpu_bind_cpus, machine.topology,
                             machine.allowed);
  }
  if (!config.numa_binding) return {};
  std::vector<NumaAnchor> anchors;
  if (machine.gpus.empty()) {
    std::vector<int> nodes;
    for (int node : machine.topology.numa_nodes()) {
      if (!intersect_ids(machine.topology.cpus_of_node(node), machine.allowed).empty()) {
        nodes.push_back(node);
      }
    }
    anchors = spread_anchors(config.nproc_per_node, nodes);
  } else {
    std::vector<int> gpu_nodes;
    for (const auto& gpu : machine.gpus) {
      if (!gpu.locality_known) {
        throw ConfigError("--numa_binding: CUDA_VISIBLE_DEVICES names the MIG instance '" +
                          gpu.uuid +
                          "', and this machine's GPUs are on several NUMA nodes: which GPU it "
                          "belongs to is NVML's to say, which ddplaunch does not read; name "
                          "its GPU by index or GPU- UUID, or bind with --cpu_bind");
      }
      gpu_nodes.push_back(gpu.numa_node);
    }
    anchors = gpu_anchors(config.nproc_per_node, gpu_nodes);
  }
  std::vector<CpuBinding> bindings;
  const std::string mode = "--numa_binding=" + std::string(numa_mode_name(*config.numa_binding));
  for (const auto& anchor : anchors) {
    auto binding =
        numa_binding_for(*config.numa_binding, machine.topology, machine.allowed, anchor);
    // A node whose memory the cpuset withholds would make set_mempolicy fail in the worker;
    // bind within what is allowed, and leave memory alone (the line says so) if nothing is.
    if (!machine.allowed_mems.empty())
      binding.mems = intersect_ids(binding.mems, machine.allowed_mems);
    if (!machine.numa_memory) binding.mems.clear();
    std::string gpu_text = ", no GPU";
    if (anchor.gpu >= 0) {
      const auto& gpu = machine.gpus[static_cast<size_t>(anchor.gpu)];
      gpu_text = ", GPU " + std::to_string(anchor.gpu) + " (" +
                 (gpu.bus_id.empty() ? gpu.uuid : gpu.bus_id) + ")";
    }
    binding.reason = mode + gpu_text;
    bindings.push_back(std::move(binding));
  }
  return bindings;
}

std::string describe_binding(int local_rank, const CpuBinding& binding, const Topology& topology) {
  std::string line = "local rank " + std::to_string(local_rank) + ": CPUs " +
                     format_cpu_list(binding.cpus) + " (" +
                     node_list(topology.nodes_of(binding.cpus)) + "), ";
  line += binding.mems.empty() ? "memory not bound" : "memory bound to " + node_list(binding.mems);
  if (!binding.reason.empty()) line += " [" + binding.reason + "]";
  return line;
}

}  // namespace ddp::launcher
