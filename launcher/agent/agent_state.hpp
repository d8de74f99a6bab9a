#pragma once
// The agent's states: INIT -> RENDEZVOUS -> HEALTHY -> (STOPPING -> RENDEZVOUS again |
// EXITING -> DONE).
namespace ddp::launcher {

enum class AgentState { kInit, kRendezvous, kHealthy, kStopping, kExiting, kDone };

// "INIT", "RENDEZVOUS", "HEALTHY", "STOPPING", "EXITING", "DONE" (the health endpoint's words).
const char* state_name(AgentState state);

}  // namespace ddp::launcher
