#pragma once
// The agent's events as the health views read them, for their tests: {"event", "time", ...}.
#include <nlohmann/json.hpp>
#include <string>

namespace ddp::launcher::test {

// The event name at time (unix seconds) with fields added.
inline nlohmann::json event(const std::string& name, double time,
                            nlohmann::json fields = nlohmann::json::object()) {
  nlohmann::json e = {{"event", name}, {"time", time}};
  e.update(fields);
  return e;
}

}  // namespace ddp::launcher::test
