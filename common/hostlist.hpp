#pragma once
// SLURM hostlist expressions, one grammar for the launcher and the worker runtime:
// "gpu[01-04,07],cpu-a[1-2]" -> gpu01 gpu02 gpu03 gpu04 gpu07
// cpu-a1 cpu-a2. Zero padding of a range's lower bound is kept ("[08-10]" -> 08 09 10);
// several bracket groups in one name expand as a product ("r[1-2]n[1-2]" -> r1n1 r1n2 ...).
// An item that is a bracketed IPv6 address is that address: "[fd00::1],n1" -> fd00::1 n1.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ddp {

// Upper bound on the hosts one expression may expand to (a typo like [1-99999999] must not
// eat the memory of the agent).
inline constexpr size_t kMaxHostlistHosts = 1 << 20;

// Expands hostlist in order. Throws ConfigError naming the expression, the position and
// what was expected (unbalanced brackets, empty items, reversed or non-numeric ranges).
std::vector<std::string> expand_hostlist(std::string_view hostlist);

// The first host of hostlist (where SLURM puts node 0 of a step); same errors.
std::string first_host(std::string_view hostlist);

}  // namespace ddp
