#pragma once
// CPU and NUMA node lists in the kernel's cpulist syntax ("0-3,8,10-11"), as in
// /proc/self/status's Cpus_allowed_list and /sys/devices/system/node/node0/cpulist.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::launcher {

// "0-3,8" -> {0,1,2,3,8} (sorted, unique); nullopt when empty, malformed, a range is
// reversed, or an id exceeds max_id.
std::optional<std::vector<int>> parse_cpu_list(std::string_view text, int max_id = 1 << 20);
// {0,1,2,3,8} -> "0-3,8"; "" for none. ids need not be sorted.
std::string format_cpu_list(std::vector<int> ids);
// The ids in both sorted lists.
std::vector<int> intersect_ids(const std::vector<int>& a, const std::vector<int>& b);

}  // namespace ddp::launcher
