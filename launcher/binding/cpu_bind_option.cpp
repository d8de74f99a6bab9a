#include "launcher/binding/cpu_bind_option.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "common/error.hpp"
#include "common/parse_int.hpp"
#include "launcher/binding/cpu_list.hpp"

namespace ddp::launcher {
namespace {

constexpr int kMaxCpu = 1 << 16;  // well above any machine's CPU count; bounds a mask's size

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> items;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, separator);) items.push_back(item);
  if (!text.empty() && text.back() == separator) items.emplace_back();
  return items;
}

std::optional<std::vector<int>> parse_mask(std::string text) {
  if (text.starts_with("0x") || text.starts_with("0X")) text.erase(0, 2);
  if (text.empty() || text.size() * 4 > static_cast<size_t>(kMaxCpu)) return std::nullopt;
  std::vector<int> cpus;
  int bit = 0;
  for (auto it = text.rbegin(); it != text.rend(); ++it, bit += 4) {
    if (std::isxdigit(static_cast<unsigned char>(*it)) == 0) return std::nullopt;
    int digit = std::stoi(std::string(1, *it), nullptr, 16);
    for (int i = 0; i < 4; ++i) {
      if ((digit & (1 << i)) != 0) cpus.push_back(bit + i);
    }
  }
  if (cpus.empty()) return std::nullopt;
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

}  // namespace

std::vector<std::vector<int>> parse_cpu_bind(const std::string& value, int nproc) {
  const std::string expected =
      " (expected map_cpu:CPU,CPU,... or mask_cpu:MASK,MASK,... with one entry per local "
      "rank, or CPU lists per local rank separated by ':' like 0-3:4-7)";
  auto bad = [&](const std::string& why) {
    return ConfigError("--cpu_bind=" + value + ": " + why + expected);
  };
  std::vector<std::string> entries;
  std::string kind = "list";
  if (value.starts_with("map_cpu:") || value.starts_with("mask_cpu:")) {
    auto colon = value.find(':');
    kind = value.substr(0, colon);
    entries = split(value.substr(colon + 1), ',');
  } else {
    entries = split(value, ':');
  }
  std::vector<std::vector<int>> per_rank;
  for (const auto& entry : entries) {
    std::optional<std::vector<int>> cpus;
    if (kind == "map_cpu") {
      if (auto cpu = try_parse_int(entry, 0, kMaxCpu))
        cpus = std::vector<int>{static_cast<int>(*cpu)};
    } else if (kind == "mask_cpu") {
      cpus = parse_mask(entry);
    } else {
      cpus = parse_cpu_list(entry, kMaxCpu);
    }
    if (!cpus) {
      throw bad("'" + entry + "' (local rank " + std::to_string(per_rank.size()) + ") is not a " +
                (kind == "map_cpu"    ? "CPU number"
                 : kind == "mask_cpu" ? "non-zero hexadecimal CPU mask"
                                      : "CPU list like 0-3,8"));
    }
    per_rank.push_back(std::move(*cpus));
  }
  if (static_cast<int>(per_rank.size()) != nproc) {
    throw bad(std::to_string(per_rank.size()) + " entries for " + std::to_string(nproc) +
              " local ranks (--nproc_per_node=" + std::to_string(nproc) + ")");
  }
  for (size_t a = 0; a < per_rank.size(); ++a) {
    for (size_t b = a + 1; b < per_rank.size(); ++b) {
      auto shared = intersect_ids(per_rank[a], per_rank[b]);
      if (!shared.empty()) {
        throw bad("local ranks " + std::to_string(a) + " and " + std::to_string(b) +
                  " would share CPU(s) " + format_cpu_list(shared) +
                  "; each rank's CPUs must be its own (--numa_binding=node shares a node)");
      }
    }
  }
  return per_rank;
}

std::vector<CpuBinding> cpu_bind_bindings(const std::string& value,
                                          const std::vector<std::vector<int>>& per_rank,
                                          const Topology& topology,
                                          const std::vector<int>& allowed) {
  std::vector<CpuBinding> bindings;
  for (size_t rank = 0; rank < per_rank.size(); ++rank) {
    const auto& cpus = per_rank[rank];
    std::vector<int> unknown;
    std::vector<int> refused;
    for (int cpu : cpus) {
      if (topology.find(cpu) == nullptr) {
        unknown.push_back(cpu);
      } else if (!std::binary_search(allowed.begin(), allowed.end(), cpu)) {
        refused.push_back(cpu);
      }
    }
    std::string where = "--cpu_bind=" + value + ": local rank " + std::to_string(rank) + "'s ";
    if (!unknown.empty()) {
      throw ConfigError(where + "CPU(s) " + format_cpu_list(unknown) + " do not exist (" +
                        topology.description + " has CPUs " + format_cpu_list(topology.cpus()) +
                        ")");
    }
    if (!refused.empty()) {
      throw ConfigError(where + "CPU(s) " + format_cpu_list(refused) +
                        " are outside the CPUs this process may use (" + format_cpu_list(allowed) +
                        "; a cgroup, taskset or srun step narrowed them)");
    }
    CpuBinding binding;
    binding.cpus = cpus;
    binding.reason = "--cpu_bind";
    bindings.push_back(std::move(binding));
  }
  return bindings;
}

}  // namespace ddp::launcher
