#pragma once
// --signals_to_handle: which signals the agent catches and forwards to its workers (torchrun
// 2.x's option). A signal not listed keeps its default action; one ignored when the agent
// started (SIGHUP under nohup) stays ignored even when listed.
#include <string>
#include <vector>

namespace ddp::launcher {

// torchrun's default (SIGTERM,SIGINT,SIGHUP,SIGQUIT) plus SIGUSR1 and SIGUSR2, which
// ddplaunch has always forwarded (SLURM's --signal=USR1@T warns of the end of a job with them).
inline constexpr const char* kDefaultSignalsToHandle =
    "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2";

// Parses "SIGTERM,SIGUSR1" (spaces around names allowed, empty items skipped, "" is none) into
// signal numbers, in order, without duplicates. Throws ConfigError naming every name that is
// not a signal the agent can handle, and the names it accepts.
std::vector<int> parse_signal_list(const std::string& value);
// Every signal --signals_to_handle accepts (the guardian ignores them all, since a signal sent
// to the agent's process group must not take it away).
std::vector<int> handleable_signals();
// The names of signals, comma-separated ("SIGTERM,SIGINT"): what workers see in
// TORCHELASTIC_SIGNALS_TO_HANDLE, as torchrun sets it.
std::string signal_list_names(const std::vector<int>& signals);

}  // namespace ddp::launcher
