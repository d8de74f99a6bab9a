#include "launcher/binding/gpu_locality.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "common/parse_int.hpp"

namespace ddp::launcher {
namespace {

std::string trim(std::string text) {
  text.erase(0, text.find_first_not_of(" \t\n"));
  text.erase(text.find_last_not_of(" \t\n") + 1);
  return text;
}

std::string uuid_of(const std::filesystem::path& information) {
  std::ifstream in(information);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("GPU UUID:")) return trim(line.substr(9));
  }
  return {};
}

int numa_node_of(const std::filesystem::path& sysfs_node) {
  std::ifstream in(sysfs_node);
  std::string text;
  std::getline(in, text);
  auto node = try_parse_int(trim(text), -1, 1 << 20);
  return node ? std::max(0, static_cast<int>(*node)) : 0;
}

}  // namespace

// /dev/nvidia<N> device nodes (not nvidiactl, nvidia-uvm, ...).
size_t device_nodes(const std::filesystem::path& root) {
  std::error_code ec;
  size_t nodes = 0;
  for (auto it = std::filesystem::directory_iterator(root / "dev", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    auto name = it->path().filename().string();
    if (name.size() > 6 && name.starts_with("nvidia") && try_parse_int(name.substr(6))) ++nodes;
  }
  return nodes;
}

// What a MIG instance named by CUDA_VISIBLE_DEVICES is known to be near: the NUMA node every
// GPU shares, when they do.
GpuInfo mig_instance(const std::string& uuid, const std::vector<GpuInfo>& gpus) {
  GpuInfo instance;
  instance.uuid = uuid;
  instance.numa_node = gpus.front().numa_node;
  instance.locality_known = std::all_of(gpus.begin(), gpus.end(), [&](const GpuInfo& gpu) {
    return gpu.numa_node == instance.numa_node;
  });
  return instance;
}

std::vector<GpuInfo> probe_gpus(const std::filesystem::path& root) {
  std::vector<GpuInfo> gpus;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(root / "proc/driver/nvidia/gpus", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    GpuInfo gpu;
    gpu.bus_id = it->path().filename().string();
    std::transform(gpu.bus_id.begin(), gpu.bus_id.end(), gpu.bus_id.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    gpu.uuid = uuid_of(it->path() / "information");
    gpu.numa_node = numa_node_of(root / "sys/bus/pci/devices" / gpu.bus_id / "numa_node");
    gpus.push_back(gpu);
  }
  std::sort(gpus.begin(), gpus.end(),
            [](const GpuInfo& a, const GpuInfo& b) { return a.bus_id < b.bus_id; });
  gpus.resize(std::min(gpus.size(), device_nodes(root)));
  return gpus;
}

std::vector<GpuInfo> visible_gpus(const std::vector<GpuInfo>& gpus, const Environment& env) {
  auto it = env.find("CUDA_VISIBLE_DEVICES");
  if (it == env.end()) return gpus;
  std::vector<GpuInfo> visible;
  std::vector<size_t> used;
  std::stringstream items(it->second);
  for (std::string item; std::getline(items, item, ',');) {
    item = trim(item);
    std::optional<size_t> found;
    if (auto index = try_parse_int(item, 0, static_cast<int64_t>(gpus.size()) - 1)) {
      found = static_cast<size_t>(*index);
    } else if (item.starts_with("MIG-") && !gpus.empty()) {
      visible.push_back(mig_instance(item, gpus));  // a device of its own, never a repeat
      continue;
    } else if (item.starts_with("GPU-")) {
      int matches = 0;
      for (size_t i = 0; i < gpus.size(); ++i) {
        if (gpus[i].uuid.starts_with(item)) {
          found = i;
          ++matches;
        }
      }
      if (matches > 1) found.reset();  // an ambiguous prefix names no GPU
    }
    // CUDA's reading: the first entry naming no GPU ends the list ("" and "-1" hide all).
    if (!found) break;
    if (std::find(used.begin(), used.end(), *found) != used.end()) continue;
    used.push_back(*found);
    visible.push_back(gpus[*found]);
  }
  return visible;
}

}  // namespace ddp::launcher
