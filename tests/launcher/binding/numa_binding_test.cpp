// --numa_binding's four modes on hwloc's synthetic topologies: two sockets, four NUMA nodes,
// eight GPUs ("GPU i sits under NUMA node i/2"), without GPUs, and with CPUs held back by the
// process's affinity; so they run on any one-node machine.
#include "launcher/binding/numa_binding.hpp"

#include <algorithm>
#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "launcher/binding/cpu_list.hpp"
#include "launcher/binding/topology.hpp"
#include "launcher/process/worker_binding.hpp"

using namespace ddp::launcher;
using Catch::Matchers::Contains;

namespace {

// 2 packages x 2 NUMA nodes x 2 L3 x 4 cores x 2 hyperthreads: node n holds CPUs 16n..16n+15.
const std::string kTwoSockets = "pack:2 numa:2 l3:2 core:4 pu:2";

std::vector<int> range(int first, int last) {
  std::vector<int> ids;
  for (int id = first; id <= last; ++id) ids.push_back(id);
  return ids;
}

// Eight GPUs, GPU i under NUMA node i/2, in PCI order.
std::vector<GpuInfo> eight_gpus() {
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < 8; ++i) {
    GpuInfo gpu;
    gpu.bus_id = "0000:" + std::to_string(10 + i) + ":00.0";
    gpu.uuid = "GPU-0000000" + std::to_string(i);
    gpu.numa_node = i / 2;
    gpus.push_back(gpu);
  }
  return gpus;
}

MachineLayout machine(const std::string& synthetic, const std::vector<GpuInfo>& gpus,
                      const Environment& env = {}) {
  MachineLayout layout;
  layout.topology = load_synthetic_topology(synthetic);
  layout.allowed = layout.topology.cpus();
  layout.gpus = visible_gpus(gpus, env);
  return layout;
}

std::vector<CpuBinding> bind_ranks(NumaMode mode, const MachineLayout& layout, int nproc) {
  LaunchConfig config;
  config.nproc_per_node = nproc;
  config.numa_binding = mode;
  return resolve_worker_bindings(config, layout);
}

std::string error_of(NumaMode mode, const MachineLayout& layout, int nproc) {
  try {
    bind_ranks(mode, layout, nproc);
  } catch (const ddp::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

// Every binding's CPUs are its own, and together they cover expected.
void check_partition(const std::vector<CpuBinding>& bindings, const std::vector<int>& expected) {
  std::vector<int> all;
  for (const auto& binding : bindings)
    all.insert(all.end(), binding.cpus.begin(), binding.cpus.end());
  std::sort(all.begin(), all.end());
  CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());  // no CPU twice
  CHECK(all == expected);
}

}  // namespace

TEST_CASE("hwloc's synthetic topology: CPUs, cores, caches, nodes and sockets", "[binding]") {
  auto topology = load_synthetic_topology(kTwoSockets);
  REQUIRE(topology.pus.size() == 64);
  CHECK(topology.numa_nodes() == std::vector<int>{0, 1, 2, 3});
  CHECK(topology.cpus_of_node(1) == range(16, 31));
  CHECK(topology.find(33)->package == 1);
  CHECK(topology.find(0)->core == topology.find(1)->core);  // hyperthreads of one core
  CHECK(topology.find(1)->core != topology.find(2)->core);
  CHECK(topology.find(0)->cache == topology.find(7)->cache);  // one L3: 4 cores
  CHECK(topology.find(7)->cache != topology.find(8)->cache);
  CHECK(topology.nodes_of({3, 40}) == std::vector<int>{0, 2});
  CHECK_THROWS_WITH(load_synthetic_topology("pack:2 bogus:3"), Contains("'pack:2 bogus:3'"));
}

TEST_CASE("node: each rank gets every CPU and the memory of its GPU's NUMA node", "[binding]") {
  auto bindings = bind_ranks(NumaMode::kNode, machine(kTwoSockets, eight_gpus()), 8);
  REQUIRE(bindings.size() == 8);
  for (int rank = 0; rank < 8; ++rank) {
    INFO("local rank " << rank);
    int node = rank / 2;
    CHECK(bindings[rank].cpus == range(16 * node, 16 * node + 15));
    CHECK(bindings[rank].mems == std::vector<int>{node});
    CHECK_THAT(bindings[rank].reason, Contains("GPU " + std::to_string(rank)));
  }
}

TEST_CASE("socket: each rank gets both NUMA nodes of its GPU's socket", "[binding]") {
  auto bindings = bind_ranks(NumaMode::kSocket, machine(kTwoSockets, eight_gpus()), 8);
  REQUIRE(bindings.size() == 8);
  for (int rank = 0; rank < 8; ++rank) {
    INFO("local rank " << rank);
    int socket = rank / 4;
    CHECK(bindings[rank].cpus == range(32 * socket, 32 * socket + 31));
    CHECK(bindings[rank].mems == std::vector<int>{2 * socket, 2 * socket + 1});
  }
}

TEST_CASE("exclusive: a node's cores split evenly among its GPUs, none shared", "[binding]") {
  auto bindings = bind_ranks(NumaMode::kExclusive, machine(kTwoSockets, eight_gpus()), 8);
  REQUIRE(bindings.size() == 8);
  for (int rank = 0; rank < 8; ++rank) {
    INFO("local rank " << rank);
    int first = 16 * (rank / 2) + 8 * (rank % 2);  // half the node's 8 cores, with siblings
    CHECK(bindings[rank].cpus == range(first, first + 7));
    CHECK(bindings[rank].mems == std::vector<int>{rank / 2});
  }
  check_partition(bindings, range(0, 63));
}

TEST_CASE("exclusive: fewer workers than GPUs still get only their GPU's share", "[binding]") {
  // torchrun divides a node among all its GPUs, used or not.
  auto bindings = bind_ranks(NumaMode::kExclusive, machine(kTwoSockets, eight_gpus()), 3);
  REQUIRE(bindings.size() == 3);
  CHECK(bindings[0].cpus == range(0, 7));
  CHECK(bindings[1].cpus == range(8, 15));
  CHECK(bindings[2].cpus == range(16, 23));
}

TEST_CASE("exclusive: uneven shares give the lowest GPUs one more core", "[binding]") {
  std::vector<GpuInfo> three(3);  // all on node 0 of an 8-core machine
  auto bindings = bind_ranks(NumaMode::kExclusive, machine("pack:1 numa:1 core:8 pu:2", three), 3);
  REQUIRE(bindings.size() == 3);
  CHECK(bindings[0].cpus == range(0, 5));    // 3 cores
  CHECK(bindings[1].cpus == range(6, 11));   // 3 cores
  CHECK(bindings[2].cpus == range(12, 15));  // 2 cores
}

TEST_CASE("exclusive: hyperthreads numbered apart stay with their core", "[binding]") {
  // As on most servers: core i holds CPUs i and i+4.
  auto layout = machine("pack:1 numa:1 core:4 pu:2(indexes=2*4:1*2)", std::vector<GpuInfo>(2));
  REQUIRE(layout.topology.find(0)->core == layout.topology.find(4)->core);
  auto bindings = bind_ranks(NumaMode::kExclusive, layout, 2);
  CHECK(bindings[0].cpus == std::vector<int>{0, 1, 4, 5});
  CHECK(bindings[1].cpus == std::vector<int>{2, 3, 6, 7});
}

TEST_CASE("exclusive: more GPUs on a node than cores is an error naming both", "[binding]") {
  auto error = error_of(NumaMode::kExclusive,
                        machine("pack:1 numa:1 core:2 pu:2", std::vector<GpuInfo>(3)), 3);
  CHECK_THAT(error, Contains("--numa_binding=exclusive"));
  CHECK_THAT(error, Contains("NUMA node 0"));
  CHECK_THAT(error, Contains("2 physical core(s)"));
  CHECK_THAT(error, Contains("for 3 GPUs"));
}

TEST_CASE("core-complex: one L3 each within the GPU's node, round-robin when short", "[binding]") {
  // Four L3s of 2 cores per node: an L3 is 4 CPUs, a node 16.
  auto layout = machine("pack:2 numa:2 l3:4 core:2 pu:2", eight_gpus());
  auto bindings = bind_ranks(NumaMode::kCoreComplex, layout, 8);
  REQUIRE(bindings.size() == 8);
  for (int rank = 0; rank < 8; ++rank) {
    INFO("local rank " << rank);
    int first = 16 * (rank / 2) + 4 * (rank % 2);
    CHECK(bindings[rank].cpus == range(first, first + 3));
    CHECK(bindings[rank].mems == std::vector<int>{rank / 2});
  }
  // exclusive on the same machine: half a node each, not one L3.
  CHECK(bind_ranks(NumaMode::kExclusive, layout, 1)[0].cpus == range(0, 7));

  // Three GPUs on a node with two L3s: the third shares the first L3.
  auto short_of_caches =
      bind_ranks(NumaMode::kCoreComplex,
                 machine("pack:1 numa:1 l3:2 core:2 pu:2", std::vector<GpuInfo>(3)), 3);
  CHECK(short_of_caches[0].cpus == range(0, 3));
  CHECK(short_of_caches[1].cpus == range(4, 7));
  CHECK(short_of_caches[2].cpus == range(0, 3));
}

TEST_CASE("without GPUs, local ranks spread evenly over the NUMA nodes", "[binding]") {
  auto layout = machine(kTwoSockets, {});
  auto eight = bind_ranks(NumaMode::kNode, layout, 8);
  for (int rank = 0; rank < 8; ++rank) CHECK(eight[rank].mems == std::vector<int>{rank / 2});
  CHECK_THAT(eight[0].reason, Contains("no GPU"));
  // Two ranks: one per socket, not both on socket 0.
  auto two = bind_ranks(NumaMode::kNode, layout, 2);
  CHECK(two[0].cpus == range(0, 15));
  CHECK(two[1].cpus == range(32, 47));
  // Exclusive shares among the ranks placed on a node, none shared.
  auto exclusive = bind_ranks(NumaMode::kExclusive, layout, 8);
  CHECK(exclusive[0].cpus == range(0, 7));
  CHECK(exclusive[1].cpus == range(8, 15));
  check_partition(exclusive, range(0, 63));
  // More ranks than nodes and uneven: 3 ranks on node 0 of a one-node machine.
  auto one_node = bind_ranks(NumaMode::kExclusive, machine("pack:1 numa:1 core:6 pu:1", {}), 3);
  check_partition(one_node, range(0, 5));
  for (const auto& binding : one_node) CHECK(binding.cpus.size() == 2);
}

TEST_CASE("CUDA_VISIBLE_DEVICES decides which GPU (and so which node) a local rank uses",
          "[binding]") {
  auto layout = machine(kTwoSockets, eight_gpus(), {{"CUDA_VISIBLE_DEVICES", "6,GPU-00000003,0"}});
  REQUIRE(layout.gpus.size() == 3);
  auto bindings = bind_ranks(NumaMode::kNode, layout, 3);
  CHECK(bindings[0].mems == std::vector<int>{3});  // GPU 6
  CHECK(bindings[1].mems == std::vector<int>{1});  // GPU 3, by UUID
  CHECK(bindings[2].mems == std::vector<int>{0});  // GPU 0
  // Exclusive shares still count every visible GPU on the node: GPU 6 alone on node 3.
  CHECK(bind_ranks(NumaMode::kExclusive, layout, 1)[0].cpus == range(48, 63));
}

TEST_CASE("more workers than visible GPUs is an error naming the counts", "[binding]") {
  auto error = error_of(NumaMode::kNode,
                        machine(kTwoSockets, eight_gpus(), {{"CUDA_VISIBLE_DEVICES", "0,1"}}), 4);
  CHECK_THAT(error, Contains("4 workers per node but only 2 visible GPU(s)"));
}

TEST_CASE("only the CPUs this process may use are bound, and a GPU node without any is an error",
          "[binding]") {
  auto layout = machine(kTwoSockets, eight_gpus());
  layout.allowed = range(4, 63);  // as under taskset -c 4-63
  auto bindings = bind_ranks(NumaMode::kNode, layout, 2);
  CHECK(bindings[0].cpus == range(4, 15));
  layout.allowed = range(16, 63);
  auto error = error_of(NumaMode::kNode, layout, 2);
  CHECK_THAT(error, Contains("NUMA node 0 (GPU 0's) has no CPU this process may use"));
  CHECK_THAT(error, Contains("allowed: 16-63"));
}

TEST_CASE("each worker's binding is described on one line", "[binding]") {
  auto layout = machine(kTwoSockets, eight_gpus());
  auto bindings = bind_ranks(NumaMode::kSocket, layout, 8);
  CHECK(describe_binding(5, bindings[5], layout.topology) ==
        "local rank 5: CPUs 32-63 (NUMA nodes 2-3), memory bound to NUMA nodes 2-3 "
        "[--numa_binding=socket, GPU 5 (0000:15:00.0)]");
  CpuBinding cpus_only{{3, 17}, {}, "--cpu_bind"};
  CHECK(describe_binding(0, cpus_only, layout.topology) ==
        "local rank 0: CPUs 3,17 (NUMA nodes 0-1), memory not bound [--cpu_bind]");
}

TEST_CASE("memory is bound only to nodes the cpuset allows, else left alone", "[binding]") {
  auto layout = machine(kTwoSockets, eight_gpus());
  layout.allowed_mems = {1, 2};  // as a cpuset's Mems_allowed_list
  auto socket = bind_ranks(NumaMode::kSocket, layout, 1);
  CHECK(socket[0].mems == std::vector<int>{1});
  auto node = bind_ranks(NumaMode::kNode, layout, 1);
  CHECK(node[0].cpus == range(0, 15));
  CHECK(node[0].mems.empty());
  CHECK_THAT(describe_binding(0, node[0], layout.topology), Contains("memory not bound"));
}

TEST_CASE(
    "a MIG instance in CUDA_VISIBLE_DEVICES is one GPU to --nproc_per_node and --numa_binding",
    "[binding]") {
  // Both read CUDA_VISIBLE_DEVICES through visible_gpus: --nproc_per_node=gpu once counted
  // the MIG instance as 1 GPU while --numa_binding saw none and spread the rank over nodes.
  const Environment env = {{"CUDA_VISIBLE_DEVICES", "MIG-5e2c7d1a"}, {"PATH", "/usr/bin:/bin"}};
  std::vector<GpuInfo> one_gpu = {eight_gpus()[3]};  // on NUMA node 1
  CHECK(resolve_nproc_per_node("gpu", env, [&] { return one_gpu; }) == 1);
  const auto bindings = bind_ranks(NumaMode::kNode, machine(kTwoSockets, one_gpu, env), 1);
  REQUIRE(bindings.size() == 1);
  CHECK(bindings[0].mems == std::vector<int>{1});
  CHECK_THAT(bindings[0].reason, Catch::Contains("GPU 0 (MIG-5e2c7d1a)"));
  // GPUs on several nodes: which one holds the instance is NVML's to say; refuse, saying so.
  CHECK(resolve_nproc_per_node("gpu", env, [] { return eight_gpus(); }) == 1);
  CHECK_THAT(error_of(NumaMode::kNode, machine(kTwoSockets, eight_gpus(), env), 1),
             Catch::Contains("MIG instance 'MIG-5e2c7d1a'") && Catch::Contains("--cpu_bind"));
}
