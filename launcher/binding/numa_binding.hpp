#pragma once
// --numa_binding's four modes (torchrun 2.x's torch/numa/binding.py; docs/binding.md), as
// pure functions of a Topology snapshot, the CPUs this process may use, and where each local
// rank is anchored: its GPU's NUMA node, or without GPUs an even spread over the nodes.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/binding/cpu_binding.hpp"
#include "launcher/binding/topology.hpp"

namespace ddp::launcher {

enum class NumaMode { kNode, kSocket, kExclusive, kCoreComplex };

// "node", "socket", "exclusive", "core-complex" (torchrun's names); nullopt for others.
std::optional<NumaMode> parse_numa_mode(std::string_view text);
std::string_view numa_mode_name(NumaMode mode);

// Where one local rank is bound: a NUMA node, and its share of it (slot of slots) for the
// modes that divide a node (exclusive, core-complex).
struct NumaAnchor {
  int node = 0;
  int slot = 0;   // this rank's index among those sharing the node
  int slots = 1;  // how many share it
  int gpu = -1;   // the visible GPU (CUDA index) the rank uses; -1 without GPUs
};

// Local rank i uses visible GPU i, whose NUMA node is gpu_nodes[i] (CUDA order). A node's
// slots are all the visible GPUs on it, used or not, as in torchrun. ConfigError (naming
// the counts) when nproc exceeds the visible GPUs.
std::vector<NumaAnchor> gpu_anchors(int nproc, const std::vector<int>& gpu_nodes);
// Without GPUs: nproc local ranks spread evenly over nodes (sorted), in blocks: rank r on
// nodes[r * nodes.size() / nproc].
std::vector<NumaAnchor> spread_anchors(int nproc, const std::vector<int>& nodes);
// The binding of the rank at anchor under mode, within allowed (sorted CPUs this process may
// use): its CPUs, and as memory the NUMA node(s) they belong to. ConfigError when the node
// has no allowed CPU, or (exclusive) fewer allowed physical cores than slots.
CpuBinding numa_binding_for(NumaMode mode, const Topology& topology,
                            const std::vector<int>& allowed, const NumaAnchor& anchor);

}  // namespace ddp::launcher
