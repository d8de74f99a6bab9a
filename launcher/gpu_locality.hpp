#pragma once
// Where each GPU sits: its PCI bus id and NUMA node, read without CUDA from the NVIDIA
// driver's /proc entries and the PCI devices in sysfs. Tests give a table instead
// (hwloc's synthetic topologies have no PCI devices).
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "launcher/launch_config.hpp"

namespace ddp::launcher {

struct GpuInfo {
  std::string bus_id;  // "0000:18:00.0"
  std::string uuid;    // "GPU-8932f937-...", empty when the driver does not say
  int numa_node = 0;   // the kernel's -1 (no NUMA information) reads as node 0, as torchrun's
};

// The NVIDIA GPUs under root ("/" but in tests) in PCI bus order, which is CUDA's order
// under CUDA_DEVICE_ORDER=PCI_BUS_ID and on machines of identical GPUs: the directories of
// /proc/driver/nvidia/gpus/, their "GPU UUID:" lines, and /sys/bus/pci/devices/<bus>/numa_node.
std::vector<GpuInfo> probe_gpu_locality(const std::filesystem::path& root = "/");
// The GPUs present (probe_gpu_locality; tests inject a table).
using GpuLocalityProbe = std::function<std::vector<GpuInfo>()>;
// The GPUs the workers see, in CUDA's index order: CUDA_VISIBLE_DEVICES' entries (indices,
// or UUIDs and their unique prefixes) up to the first that names no GPU, or all of them.
std::vector<GpuInfo> visible_gpus(const std::vector<GpuInfo>& gpus, const Environment& env);

}  // namespace ddp::launcher
