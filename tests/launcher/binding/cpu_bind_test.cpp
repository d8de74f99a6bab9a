// --cpu_bind's syntax and checks, the --numa_binding/--cpu_bind options on the command line
// (both spellings, PET_*), CPU lists, and reading GPU locality from a fake /proc and /sys.
#include <catch2/catch.hpp>
#include <filesystem>

#include "common/error.hpp"
#include "launcher/binding/cpu_bind_option.hpp"
#include "launcher/binding/cpu_list.hpp"
#include "launcher/binding/gpu_locality.hpp"
#include "launcher/binding/topology.hpp"
#include "launcher/config/cli.hpp"
#include "tests/support/temp_dir.hpp"

using namespace ddp::launcher;
using Catch::Matchers::Contains;

namespace {

const Environment kEnv = {{"PATH", "/usr/bin:/bin"}, {"CUDA_VISIBLE_DEVICES", ""}};

std::string parse_error(const std::string& value, int nproc) {
  try {
    parse_cpu_bind(value, nproc);
  } catch (const ddp::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string cli_error(const std::vector<std::string>& args, const Environment& env = kEnv) {
  try {
    parse_command_line(args, env);
  } catch (const ddp::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

LaunchConfig parse(const std::vector<std::string>& args, const Environment& env = kEnv) {
  auto command_line = parse_command_line(args, env);
  REQUIRE(command_line.config.has_value());
  return *command_line.config;
}

using Lists = std::vector<std::vector<int>>;

}  // namespace

TEST_CASE("CPU lists read and write the kernel's cpulist syntax", "[binding]") {
  CHECK(parse_cpu_list("0-3,8,10-11") == std::vector<int>{0, 1, 2, 3, 8, 10, 11});
  CHECK(parse_cpu_list("5,1,1") == std::vector<int>{1, 5});
  for (const char* bad : {"", "3-1", "a", "1,,2", "-1", "1-", "0x2"}) {
    INFO(bad);
    CHECK_FALSE(parse_cpu_list(bad));
  }
  CHECK(format_cpu_list({11, 0, 1, 2, 3, 8, 10}) == "0-3,8,10-11");
  CHECK(format_cpu_list({}).empty());
}

TEST_CASE("cpu_bind: map_cpu, mask_cpu and CPU lists per local rank", "[binding]") {
  CHECK(parse_cpu_bind("map_cpu:0,4,8,12", 4) == Lists{{0}, {4}, {8}, {12}});
  CHECK(parse_cpu_bind("mask_cpu:0x3,c,0x30", 3) == Lists{{0, 1}, {2, 3}, {4, 5}});
  CHECK(parse_cpu_bind("0-3:4-7", 2) == Lists{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(parse_cpu_bind("0,2:1,3", 2) == Lists{{0, 2}, {1, 3}});
  CHECK(parse_cpu_bind("5", 1) == Lists{{5}});
}

TEST_CASE("cpu_bind: bad syntax, wrong length and overlap name the value", "[binding]") {
  auto error = parse_error("map_cpu:0,x", 2);
  CHECK_THAT(error, Contains("--cpu_bind=map_cpu:0,x: 'x' (local rank 1) is not a CPU number"));
  CHECK_THAT(parse_error("mask_cpu:0x0", 1), Contains("not a non-zero hexadecimal CPU mask"));
  CHECK_THAT(parse_error("mask_cpu:0xg", 1), Contains("'0xg'"));
  CHECK_THAT(parse_error("0-3:", 2), Contains("'' (local rank 1) is not a CPU list"));
  CHECK_THAT(parse_error("bind:0", 1), Contains("--cpu_bind=bind:0"));
  error = parse_error("map_cpu:0,1,2", 2);
  CHECK_THAT(error, Contains("3 entries for 2 local ranks (--nproc_per_node=2)"));
  CHECK_THAT(error, Contains("expected map_cpu:"));
  error = parse_error("0-3:3-5", 2);
  CHECK_THAT(error, Contains("--cpu_bind=0-3:3-5: local ranks 0 and 1 would share CPU(s) 3"));
}

TEST_CASE("cpu_bind: CPUs the machine lacks or the process may not use are refused", "[binding]") {
  auto topology = load_synthetic_topology("pack:1 numa:1 core:4 pu:1");
  std::vector<int> allowed{0, 1, 2, 3};
  auto bindings = cpu_bind_bindings("map_cpu:2,0", {{2}, {0}}, topology, allowed);
  REQUIRE(bindings.size() == 2);
  CHECK(bindings[0].cpus == std::vector<int>{2});
  CHECK(bindings[1].mems.empty());  // memory stays as it is, as with srun's --cpu-bind
  CHECK_THROWS_WITH(cpu_bind_bindings("map_cpu:0,9", {{0}, {9}}, topology, allowed),
                    Contains("--cpu_bind=map_cpu:0,9: local rank 1's CPU(s) 9 do not exist") &&
                        Contains("has CPUs 0-3"));
  CHECK_THROWS_WITH(
      cpu_bind_bindings("0:1-2", {{0}, {1, 2}}, topology, {0, 1}),
      Contains("local rank 1's CPU(s) 2 are outside the CPUs this process may use (0-1"));
}

TEST_CASE("numa_binding and cpu_bind: both spellings and PET_ variables", "[binding][cli]") {
  CHECK(parse({"--numa_binding=exclusive", "/bin/true"}).numa_binding == NumaMode::kExclusive);
  CHECK(parse({"--numa-binding", "core-complex", "/bin/true"}).numa_binding ==
        NumaMode::kCoreComplex);
  auto env = kEnv;
  env["PET_NUMA_BINDING"] = "socket";
  CHECK(parse({"/bin/true"}, env).numa_binding == NumaMode::kSocket);
  CHECK(parse({"--numa_binding=node", "/bin/true"}, env).numa_binding == NumaMode::kNode);
  CHECK_FALSE(parse({"/bin/true"}).numa_binding);
  CHECK_FALSE(parse({"/bin/true"}).cpu_bind);

  auto config = parse({"--nproc_per_node=2", "--cpu-bind=map_cpu:1,0", "/bin/true"});
  CHECK(config.cpu_bind == "map_cpu:1,0");
  CHECK(config.cpu_bind_cpus == Lists{{1}, {0}});
  env = kEnv;
  env["PET_CPU_BIND"] = "0-1:2-3";
  CHECK(parse({"--nproc_per_node=2", "/bin/true"}, env).cpu_bind_cpus == Lists{{0, 1}, {2, 3}});
}

TEST_CASE("numa_binding and cpu_bind: bad values are usage errors naming them", "[binding][cli]") {
  CHECK_THAT(cli_error({"--numa_binding=numa", "/bin/true"}),
             Contains("--numa_binding=numa: expected node, socket, exclusive or core-complex"));
  CHECK_THAT(cli_error({"--nproc_per_node=2", "--cpu_bind=map_cpu:0", "/bin/true"}),
             Contains("1 entries for 2 local ranks"));
  CHECK_THAT(cli_error({"--numa_binding=node", "--cpu_bind=0", "/bin/true"}),
             Contains("--cpu_bind=0 and --numa_binding=node cannot be used together"));
}

TEST_CASE("GPU locality: bus ids, UUIDs and NUMA nodes from the driver and sysfs", "[binding]") {
  ddp::test::TempDir root;
  auto add_gpu = [&](const std::string& bus, const std::string& uuid, const std::string& node) {
    auto dir = root.path() / "proc/driver/nvidia/gpus" / bus;
    std::filesystem::create_directories(dir);
    root.write(
        "proc/driver/nvidia/gpus/" + bus + "/information",
        "Model: \t\t NVIDIA H100\nGPU UUID: \t " + uuid + "\nBus Location: \t " + bus + "\n");
    std::filesystem::create_directories(root.path() / "sys/bus/pci/devices" / bus);
    if (!node.empty()) root.write("sys/bus/pci/devices/" + bus + "/numa_node", node);
  };
  add_gpu("0000:b3:00.0", "GPU-bbbb", "1\n");
  add_gpu("0000:18:00.0", "GPU-aaaa", "0\n");
  add_gpu("0000:c1:00.0", "GPU-cccc", "-1\n");  // no NUMA information: node 0, as torchrun
  CHECK(probe_gpus(root.path()).empty());       // no device nodes: not this container's GPUs
  std::filesystem::create_directories(root.path() / "dev");
  for (const char* node : {"nvidia0", "nvidia1", "nvidia2", "nvidiactl"})
    root.write(std::string("dev/") + node, "");
  auto gpus = probe_gpus(root.path());
  REQUIRE(gpus.size() == 3);
  CHECK(gpus[0].bus_id == "0000:18:00.0");  // PCI bus order
  CHECK(gpus[0].uuid == "GPU-aaaa");
  CHECK(gpus[1].numa_node == 1);
  CHECK(gpus[2].numa_node == 0);
  CHECK(probe_gpus(root.path() / "nothing").empty());

  auto visible = [&](const std::string& cvd) {
    std::vector<std::string> buses;
    for (const auto& gpu : visible_gpus(gpus, {{"CUDA_VISIBLE_DEVICES", cvd}}))
      buses.push_back(gpu.uuid);
    return buses;
  };
  CHECK(visible("2,0") == std::vector<std::string>{"GPU-cccc", "GPU-aaaa"});
  CHECK(visible("GPU-b,7,0") == std::vector<std::string>{"GPU-bbbb"});  // 7 ends the list
  CHECK(visible("GPU-,1").empty());  // an ambiguous prefix names no GPU
  CHECK(visible("-1").empty());
  CHECK(visible_gpus(gpus, {}).size() == 3);
  // A MIG instance is one device; its GPU is unknown here (NVML's to say), and so is its
  // NUMA node when the GPUs span several.
  const auto mig = visible_gpus(gpus, {{"CUDA_VISIBLE_DEVICES", "MIG-1234"}});
  REQUIRE(mig.size() == 1);
  CHECK(mig[0].uuid == "MIG-1234");
  CHECK_FALSE(mig[0].locality_known);
}
