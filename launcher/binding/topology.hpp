#pragma once
// Topology: which core, outermost cache, NUMA node and package each logical CPU (PU) belongs
// to: a plain snapshot read once with hwloc, so the binding rules (numa_binding.hpp) are pure
// functions of it. Tests load hwloc's synthetic topologies ("pack:2 numa:2 l3:2 core:4 pu:2")
// and so cover machines this one is not.
#include <string>
#include <vector>

namespace ddp::launcher {

struct Topology {
  struct Pu {
    int cpu = 0;      // the OS's CPU number (sched_setaffinity, Cpus_allowed_list)
    long core = 0;    // identifies the physical core (hyperthreads share it)
    long cache = 0;   // identifies the outermost data cache (L3: a core complex); else the core
    int numa = 0;     // NUMA node (OS index)
    int package = 0;  // socket (OS index)
  };
  std::vector<Pu> pus;      // sorted by cpu
  std::string description;  // "this machine" or "synthetic topology '<desc>'"

  // Every CPU, sorted.
  [[nodiscard]] std::vector<int> cpus() const;
  // The NUMA nodes that have CPUs, sorted.
  [[nodiscard]] std::vector<int> numa_nodes() const;
  // The CPUs of one NUMA node, sorted (empty when it has none).
  [[nodiscard]] std::vector<int> cpus_of_node(int node) const;
  // The NUMA nodes holding any of cpus, sorted.
  [[nodiscard]] std::vector<int> nodes_of(const std::vector<int>& cpus) const;
  // The entry for cpu, or null when this topology has no such CPU.
  [[nodiscard]] const Pu* find(int cpu) const;
};

// This machine's topology, as hwloc reads it. Throws Error when hwloc cannot.
Topology load_topology();
// hwloc's synthetic topology for description (hwloc 2.9 syntax, e.g.
// "pack:2 numa:2 l3:2 core:4 pu:2"). Throws Error naming it when hwloc refuses it.
Topology load_synthetic_topology(const std::string& description);

}  // namespace ddp::launcher
