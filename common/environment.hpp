#pragma once
// A process environment as name -> value: the agent's (captured once in main and passed
// down, so tests can give any), and what it derives from it.
#include <map>
#include <string>

namespace ddp {

using Environment = std::map<std::string, std::string>;

// The value of name in env; "" when it is not set (set and empty read the same).
inline std::string env_value(const Environment& env, const std::string& name) {
  const auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

}  // namespace ddp
