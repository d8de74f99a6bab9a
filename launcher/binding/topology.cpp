#include "launcher/binding/topology.hpp"

#include <hwloc.h>

#include <algorithm>
#include <memory>

#include "common/error.hpp"

namespace ddp::launcher {
namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* topology) const { hwloc_topology_destroy(topology); }
};
using TopologyPtr = std::unique_ptr<hwloc_topology, TopologyDeleter>;

long object_id(hwloc_obj_t object) {
  return static_cast<long>(object->gp_index);
}

int os_or_logical(hwloc_obj_t object) {
  return object->os_index != HWLOC_UNKNOWN_INDEX ? static_cast<int>(object->os_index)
                                                 : static_cast<int>(object->logical_index);
}

Topology snapshot(hwloc_topology_t topology, std::string description) {
  Topology result;
  result.description = std::move(description);
  int pus = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PU);
  for (int i = 0; i < pus; ++i) {
    hwloc_obj_t pu = hwloc_get_obj_by_type(topology, HWLOC_OBJ_PU, static_cast<unsigned>(i));
    Topology::Pu entry;
    entry.cpu = static_cast<int>(pu->os_index);
    entry.core = object_id(pu);
    entry.cache = -1;
    for (hwloc_obj_t up = pu->parent; up != nullptr; up = up->parent) {
      if (up->type == HWLOC_OBJ_CORE) entry.core = object_id(up);
      // Walking up, the last data or unified cache met is the outermost (torchrun's
      // "max level cache": an L3 core complex on most machines).
      if (hwloc_obj_type_is_dcache(up->type) != 0) entry.cache = object_id(up);
      if (up->type == HWLOC_OBJ_PACKAGE) entry.package = os_or_logical(up);
    }
    if (entry.cache < 0) entry.cache = entry.core;
    // hwloc 2 hangs NUMA nodes beside the CPUs as memory children; the node whose cpuset
    // holds this PU is its node.
    hwloc_obj_t node = nullptr;
    while ((node = hwloc_get_next_obj_by_type(topology, HWLOC_OBJ_NUMANODE, node)) != nullptr) {
      if (hwloc_bitmap_isset(node->cpuset, pu->os_index) != 0) {
        entry.numa = static_cast<int>(node->os_index);
        break;
      }
    }
    result.pus.push_back(entry);
  }
  std::sort(result.pus.begin(), result.pus.end(),
            [](const auto& a, const auto& b) { return a.cpu < b.cpu; });
  return result;
}

TopologyPtr make_topology() {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) throw Error("hwloc: could not initialise a topology");
  return TopologyPtr(raw);
}

}  // namespace

std::vector<int> Topology::cpus() const {
  std::vector<int> ids;
  for (const auto& pu : pus) ids.push_back(pu.cpu);
  return ids;
}

std::vector<int> Topology::numa_nodes() const {
  std::vector<int> nodes;
  for (const auto& pu : pus) nodes.push_back(pu.numa);
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  return nodes;
}

std::vector<int> Topology::cpus_of_node(int node) const {
  std::vector<int> ids;
  for (const auto& pu : pus) {
    if (pu.numa == node) ids.push_back(pu.cpu);
  }
  return ids;
}

std::vector<int> Topology::nodes_of(const std::vector<int>& cpus) const {
  std::vector<int> nodes;
  for (int cpu : cpus) {
    if (const Pu* pu = find(cpu)) nodes.push_back(pu->numa);
  }
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  return nodes;
}

const Topology::Pu* Topology::find(int cpu) const {
  auto it = std::lower_bound(pus.begin(), pus.end(), cpu,
                             [](const Pu& pu, int value) { return pu.cpu < value; });
  return it != pus.end() && it->cpu == cpu ? &*it : nullptr;
}

Topology load_topology() {
  auto topology = make_topology();
  // Keep CPUs a cgroup withholds: refusing one then says "outside the CPUs this process may
  // use" (the affinity check) instead of "does not exist".
  hwloc_topology_set_flags(topology.get(), HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  if (hwloc_topology_load(topology.get()) != 0) {
    throw Error("hwloc: could not read this machine's topology: " + errno_text(errno));
  }
  return snapshot(topology.get(), "this machine");
}

Topology load_synthetic_topology(const std::string& description) {
  auto topology = make_topology();
  if (hwloc_topology_set_synthetic(topology.get(), description.c_str()) != 0 ||
      hwloc_topology_load(topology.get()) != 0) {
    throw Error("hwloc refused the synthetic topology '" + description + "'");
  }
  return snapshot(topology.get(), "synthetic topology '" + description + "'");
}

}  // namespace ddp::launcher
