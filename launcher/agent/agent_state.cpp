#include "launcher/agent/agent_state.hpp"

namespace ddp::launcher {

const char* state_name(AgentState state) {
  switch (state) {
    case AgentState::kInit:
      return "INIT";
    case AgentState::kRendezvous:
      return "RENDEZVOUS";
    case AgentState::kHealthy:
      return "HEALTHY";
    case AgentState::kStopping:
      return "STOPPING";
    case AgentState::kExiting:
      return "EXITING";
    case AgentState::kDone:
      break;
  }
  return "DONE";
}

}  // namespace ddp::launcher
