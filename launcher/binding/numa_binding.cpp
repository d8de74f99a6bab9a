#include "launcher/binding/numa_binding.hpp"

#include <algorithm>
#include <map>

#include "common/error.hpp"
#include "launcher/binding/cpu_list.hpp"

namespace ddp::launcher {
namespace {

constexpr std::pair<NumaMode, std::string_view> kModes[] = {
    {NumaMode::kNode, "node"},
    {NumaMode::kSocket, "socket"},
    {NumaMode::kExclusive, "exclusive"},
    {NumaMode::kCoreComplex, "core-complex"},
};

std::string subject(NumaMode mode, const NumaAnchor& anchor) {
  std::string text = "--numa_binding=" + std::string(numa_mode_name(mode)) + ": NUMA node " +
                     std::to_string(anchor.node);
  if (anchor.gpu >= 0) text += " (GPU " + std::to_string(anchor.gpu) + "'s)";
  return text;
}

// allowed CPUs grouped by key (core or cache), each group sorted, groups ordered by their
// lowest CPU.
template <typename Key>
std::vector<std::vector<int>> group_by(const Topology& topology, const std::vector<int>& cpus,
                                       Key key) {
  std::map<long, std::vector<int>> groups;
  for (int cpu : cpus) groups[key(*topology.find(cpu))].push_back(cpu);
  std::vector<std::vector<int>> ordered;
  ordered.reserve(groups.size());
  for (auto& [id, members] : groups) ordered.push_back(std::move(members));
  std::sort(ordered.begin(), ordered.end(),
            [](const auto& a, const auto& b) { return a.front() < b.front(); });
  return ordered;
}

std::vector<int> join(const std::vector<std::vector<int>>& groups, size_t begin, size_t end) {
  std::vector<int> cpus;
  for (size_t i = begin; i < end; ++i) cpus.insert(cpus.end(), groups[i].begin(), groups[i].end());
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

}  // namespace

std::optional<NumaMode> parse_numa_mode(std::string_view text) {
  for (const auto& [mode, name] : kModes) {
    if (text == name) return mode;
  }
  return std::nullopt;
}

std::string_view numa_mode_name(NumaMode mode) {
  for (const auto& [candidate, name] : kModes) {
    if (candidate == mode) return name;
  }
  return "?";
}

std::vector<NumaAnchor> gpu_anchors(int nproc, const std::vector<int>& gpu_nodes) {
  if (nproc > static_cast<int>(gpu_nodes.size())) {
    throw ConfigError("--numa_binding: " + std::to_string(nproc) + " workers per node but only " +
                      std::to_string(gpu_nodes.size()) +
                      " visible GPU(s); local rank i is bound near GPU i, so use "
                      "--nproc_per_node=" +
                      std::to_string(gpu_nodes.size()) + " or fewer");
  }
  std::vector<NumaAnchor> anchors;
  for (int rank = 0; rank < nproc; ++rank) {
    NumaAnchor anchor;
    anchor.gpu = rank;
    anchor.node = gpu_nodes[static_cast<size_t>(rank)];
    anchor.slots = 0;
    for (size_t gpu = 0; gpu < gpu_nodes.size(); ++gpu) {
      if (gpu_nodes[gpu] != anchor.node) continue;
      if (static_cast<int>(gpu) < rank) ++anchor.slot;
      ++anchor.slots;
    }
    anchors.push_back(anchor);
  }
  return anchors;
}

std::vector<NumaAnchor> spread_anchors(int nproc, const std::vector<int>& nodes) {
  std::vector<NumaAnchor> anchors;
  if (nodes.empty()) return anchors;
  auto node_index = [&](int rank) {
    return static_cast<size_t>(static_cast<int64_t>(rank) * static_cast<int64_t>(nodes.size()) /
                               nproc);
  };
  for (int rank = 0; rank < nproc; ++rank) {
    NumaAnchor anchor;
    anchor.node = nodes[node_index(rank)];
    anchor.slots = 0;
    for (int other = 0; other < nproc; ++other) {
      if (node_index(other) != node_index(rank)) continue;
      if (other < rank) ++anchor.slot;
      ++anchor.slots;
    }
    anchors.push_back(anchor);
  }
  return anchors;
}

CpuBinding numa_binding_for(NumaMode mode, const Topology& topology,
                            const std::vector<int>& allowed, const NumaAnchor& anchor) {
  auto node_cpus = intersect_ids(topology.cpus_of_node(anchor.node), allowed);
  if (node_cpus.empty()) {
    throw ConfigError(subject(mode, anchor) + " has no CPU this process may use (its CPUs: " +
                      format_cpu_list(topology.cpus_of_node(anchor.node)) +
                      "; allowed: " + format_cpu_list(allowed) + ")");
  }
  CpuBinding binding;
  binding.mems = {anchor.node};
  switch (mode) {
    case NumaMode::kNode:
      binding.cpus = node_cpus;
      break;
    case NumaMode::kSocket: {
      // The socket of the node's first allowed CPU, and every node with CPUs on it.
      int package = topology.find(node_cpus.front())->package;
      binding.mems.clear();
      for (const auto& pu : topology.pus) {
        if (pu.package == package) binding.mems.push_back(pu.numa);
      }
      std::sort(binding.mems.begin(), binding.mems.end());
      binding.mems.erase(std::unique(binding.mems.begin(), binding.mems.end()), binding.mems.end());
      for (int node : binding.mems) {
        auto cpus = intersect_ids(topology.cpus_of_node(node), allowed);
        binding.cpus.insert(binding.cpus.end(), cpus.begin(), cpus.end());
      }
      std::sort(binding.cpus.begin(), binding.cpus.end());
      break;
    }
    case NumaMode::kExclusive: {
      // Whole physical cores, divided evenly; the lowest slots get one more when uneven.
      auto cores = group_by(topology, node_cpus, [](const Topology::Pu& pu) { return pu.core; });
      auto slots = static_cast<size_t>(anchor.slots);
      auto slot = static_cast<size_t>(anchor.slot);
      if (cores.size() < slots) {
        throw ConfigError(subject(mode, anchor) + " has " + std::to_string(cores.size()) +
                          " physical core(s) this process may use (CPUs " +
                          format_cpu_list(node_cpus) + ") for " + std::to_string(slots) +
                          (anchor.gpu >= 0 ? " GPUs" : " workers") +
                          "; each needs a core of its own");
      }
      size_t per = cores.size() / slots;
      size_t extra = cores.size() % slots;
      size_t begin = slot * per + std::min(slot, extra);
      binding.cpus = join(cores, begin, begin + per + (slot < extra ? 1 : 0));
      break;
    }
    case NumaMode::kCoreComplex: {
      // One outermost cache each, the fullest first; shared round-robin when too few.
      auto caches = group_by(topology, node_cpus, [](const Topology::Pu& pu) { return pu.cache; });
      std::stable_sort(caches.begin(), caches.end(),
                       [](const auto& a, const auto& b) { return a.size() > b.size(); });
      binding.cpus = caches[static_cast<size_t>(anchor.slot) % caches.size()];
      break;
    }
  }
  return binding;
}

}  // namespace ddp::launcher
