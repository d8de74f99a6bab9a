// The real ddplaunch binding its workers on this machine: each worker reads its own
// /proc/self/status (Cpus_allowed_list, Mems_allowed_list) and memory policy
// (tests/launcher/workers/binding_dump.sh), and the test checks them against the machine's
// NUMA nodes and the CPUs this test may use, so it holds on any Linux machine with 2 CPUs.
#include <sched.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <sstream>

#include "launcher/binding/cpu_list.hpp"
#include "tests/support/files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using namespace ddp::test;
using Catch::Matchers::Contains;
using ddp::launcher::format_cpu_list;
using ddp::launcher::intersect_ids;
using ddp::launcher::parse_cpu_list;
using namespace std::chrono_literals;

namespace {

constexpr auto kRunTimeout = 60s;

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(::sched_getaffinity(0, sizeof(set), &set) == 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

// NUMA node -> its CPUs this test may use, from sysfs.
std::map<int, std::vector<int>> numa_nodes() {
  std::map<int, std::vector<int>> nodes;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/sys/devices/system/node", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    auto name = it->path().filename().string();
    if (!name.starts_with("node") || name.size() == 4) continue;
    auto text = read_file(it->path() / "cpulist");
    text.erase(text.find_last_not_of('\n') + 1);
    auto cpus = parse_cpu_list(text);
    if (cpus) nodes[std::stoi(name.substr(4))] = intersect_ids(*cpus, allowed_cpus());
  }
  return nodes;
}

struct WorkerBinding {
  std::string cpus;    // Cpus_allowed_list
  std::string mems;    // Mems_allowed_list
  std::string policy;  // "default", "bind:0", ...
};

WorkerBinding read_binding(const TempDir& dir, int local_rank) {
  WorkerBinding binding;
  std::istringstream lines(
      read_file(dir.path() / ("binding_" + std::to_string(local_rank) + ".txt")));
  for (std::string line; std::getline(lines, line);) {
    auto colon = line.find(':');
    auto value = line.substr(colon + 1);
    if (line.starts_with("Cpus_allowed_list:")) binding.cpus = value;
    if (line.starts_with("Mems_allowed_list:")) binding.mems = value;
    if (line.starts_with("Policy:")) binding.policy = value;
  }
  return binding;
}

ProcessResult launch(std::vector<std::string> args, const TempDir& dir) {
  ChildOptions options;
  options.argv = {build_path("ddplaunch"), "--nproc_per_node=2", "--standalone"};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.argv.push_back(source_path("tests/launcher/workers/binding_dump.sh"));
  options.env["OUT_DIR"] = dir.path().string();
  options.env["CUDA_VISIBLE_DEVICES"] = "";  // no GPUs: ranks spread over the NUMA nodes
  return run_process(options, kRunTimeout);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("cpu_bind: each worker runs on the CPUs given for its local rank", "[process]") {
  auto cpus = allowed_cpus();
  if (cpus.size() < 2) {
    WARN("needs 2 CPUs this test may use; it has " << cpus.size());
    return;
  }
  TempDir dir;
  // Reversed, so rank 0 gets the higher CPU: the binding follows the list, not the rank.
  auto map = "map_cpu:" + std::to_string(cpus[1]) + "," + std::to_string(cpus[0]);
  auto result = launch({"--cpu_bind=" + map}, dir);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  CHECK(read_binding(dir, 0).cpus == std::to_string(cpus[1]));
  CHECK(read_binding(dir, 1).cpus == std::to_string(cpus[0]));
  CHECK(read_binding(dir, 0).policy == "default");  // --cpu_bind leaves memory alone
  // One line per worker says what it is bound to.
  CHECK(count(result.output, "local rank 0: CPUs " + std::to_string(cpus[1]) + " (NUMA node") == 1);
  CHECK(count(result.output, "local rank 1: CPUs " + std::to_string(cpus[0]) + " (NUMA node") == 1);
  CHECK(count(result.output, "memory not bound [--cpu_bind]") == 2);
}

TEST_CASE("numa_binding=node: each worker's CPUs and memory are one NUMA node's", "[process]") {
  TempDir dir;
  auto result = launch({"--numa_binding=node"}, dir);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  auto nodes = numa_nodes();
  REQUIRE_FALSE(nodes.empty());
  for (int rank : {0, 1}) {
    auto binding = read_binding(dir, rank);
    INFO("local rank " << rank << ": cpus " << binding.cpus << ", policy " << binding.policy);
    REQUIRE(binding.policy.starts_with("bind:"));
    int node = std::stoi(binding.policy.substr(5));
    REQUIRE(nodes.count(node) == 1);
    CHECK(binding.cpus == format_cpu_list(nodes[node]));
    CHECK_THAT(result.output,
               Contains("local rank " + std::to_string(rank) + ": CPUs " + binding.cpus +
                        " (NUMA node " + std::to_string(node) + "), memory bound to NUMA node " +
                        std::to_string(node) + " [--numa_binding=node, no GPU]"));
  }
  // The cpuset's own memory list is untouched: the binding is the memory policy.
  CHECK_FALSE(read_binding(dir, 0).mems.empty());
  CHECK(count(result.output, "memory bound to NUMA node") == 2);
}

TEST_CASE("numa_binding=exclusive: the workers' CPUs do not overlap", "[process]") {
  if (allowed_cpus().size() < 2) {
    WARN("needs 2 CPUs this test may use");
    return;
  }
  TempDir dir;
  auto result = launch({"--numa-binding=exclusive"}, dir);
  INFO(result.output);
  if (result.exit_code == 2 && result.output.find("physical core(s)") != std::string::npos) {
    WARN("this machine's CPUs are hyperthreads of one core: nothing to divide");
    return;
  }
  REQUIRE(result.exit_code == 0);
  auto first = parse_cpu_list(read_binding(dir, 0).cpus);
  auto second = parse_cpu_list(read_binding(dir, 1).cpus);
  REQUIRE(first);
  REQUIRE(second);
  CHECK(intersect_ids(*first, *second).empty());
  CHECK(intersect_ids(*first, allowed_cpus()) == *first);
  CHECK(intersect_ids(*second, allowed_cpus()) == *second);
}

TEST_CASE("cpu_bind naming a CPU the machine lacks stops before any worker starts", "[process]") {
  TempDir dir;
  auto result = launch({"--cpu_bind=map_cpu:0,4095"}, dir);
  CHECK(result.exit_code == 2);
  CHECK_THAT(result.output, Contains("--cpu_bind=map_cpu:0,4095: local rank 1's CPU(s) 4095 do "
                                     "not exist (this machine has CPUs "));
  CHECK_FALSE(std::filesystem::exists(dir.path() / "binding_0.txt"));
}

TEST_CASE("under taskset, cpu_bind refuses CPUs outside the agent's and node binds within",
          "[process]") {
  auto cpus = allowed_cpus();
  if (cpus.size() < 2 || !std::filesystem::exists("/usr/bin/taskset")) {
    WARN("needs 2 CPUs this test may use and /usr/bin/taskset");
    return;
  }
  auto under_taskset = [&](const std::string& option, const TempDir& dir) {
    ChildOptions options;
    options.argv = {"/usr/bin/taskset",
                    "-c",
                    std::to_string(cpus[1]),
                    build_path("ddplaunch"),
                    "--nproc_per_node=2",
                    option,
                    source_path("tests/launcher/workers/binding_dump.sh")};
    options.env["OUT_DIR"] = dir.path().string();
    options.env["CUDA_VISIBLE_DEVICES"] = "";
    return run_process(options, kRunTimeout);
  };
  TempDir refused_dir;
  auto refused = under_taskset(
      "--cpu_bind=map_cpu:" + std::to_string(cpus[1]) + "," + std::to_string(cpus[0]), refused_dir);
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.output, Contains("local rank 1's CPU(s) " + std::to_string(cpus[0]) +
                                      " are outside the CPUs this process may use (" +
                                      std::to_string(cpus[1]) + ";"));
  TempDir node_dir;
  auto node = under_taskset("--numa_binding=node", node_dir);
  INFO(node.output);
  REQUIRE(node.exit_code == 0);
  CHECK(read_binding(node_dir, 0).cpus == std::to_string(cpus[1]));
  CHECK(read_binding(node_dir, 1).cpus == std::to_string(cpus[1]));
}
