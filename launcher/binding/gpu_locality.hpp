#pragma once
// Where each GPU sits: its PCI bus id and NUMA node, read without CUDA from the NVIDIA
// driver's /proc entries and the PCI devices in sysfs. Tests give a table instead
// (hwloc's synthetic topologies have no PCI devices).
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/environment.hpp"

namespace ddp::launcher {

struct GpuInfo {
  std::string bus_id;  // "0000:18:00.0"; empty for a MIG instance
  std::string uuid;    // "GPU-8932f937-..." ("MIG-..." for an instance), empty when unknown
  int numa_node = 0;   // the kernel's -1 (no NUMA information) reads as node 0, as torchrun's
  // False for a MIG instance on a machine whose GPUs span several NUMA nodes: which GPU it
  // is part of is NVML's to say, and it is not read here.
  bool locality_known = true;
};

// The one GPU probe (no CUDA, no NVML): the NVIDIA GPUs under root ("/" but in tests) in PCI
// bus order, which is CUDA's order under CUDA_DEVICE_ORDER=PCI_BUS_ID and on machines of
// identical GPUs: the directories of /proc/driver/nvidia/gpus/, their "GPU UUID:" lines, and
// /sys/bus/pci/devices/<bus>/numa_node; at most as many as there are /dev/nvidia<N> device
// nodes (a GPU the driver knows without a node is not this container's; none without a
// loaded driver).
std::vector<GpuInfo> probe_gpus(const std::filesystem::path& root = "/");
// The GPUs present (probe_gpus; tests inject a table).
using GpuProbe = std::function<std::vector<GpuInfo>()>;
// The one reader of CUDA_VISIBLE_DEVICES: the GPUs the workers see, in CUDA's index order.
// Unset: all of them. Else its entries as CUDA reads them: indices, GPU- UUIDs and their
// unique prefixes, and MIG- instances (each one device, on the machine's only GPU or NUMA
// node, else of unknown locality), up to the first entry that names none ("" and "-1" hide
// every GPU). --nproc_per_node=gpu counts these, --numa_binding anchors ranks on them.
std::vector<GpuInfo> visible_gpus(const std::vector<GpuInfo>& gpus, const Environment& env);

}  // namespace ddp::launcher
