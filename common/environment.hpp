#pragma once
// A process environment as name -> value: the agent's (captured once in main and passed
// down, so tests can give any), and what it derives from it.
#include <map>
#include <string>

namespace ddp {

using Environment = std::map<std::string, std::string>;

}  // namespace ddp
