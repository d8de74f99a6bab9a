#pragma once
// ddplaunch's command line (CLI11): torchrun's options in both spellings
// (--nproc_per_node / --nproc-per-node), each also settable as PET_<NAME> (the flag wins),
// plus ddplaunch's own. Everything after the program name goes to the program untouched.
#include <optional>
#include <string>
#include <vector>

#include "launcher/config/launch_config.hpp"

namespace ddp::launcher {

struct CommandLine {
  std::optional<LaunchConfig> config;  // nullopt: nothing to run (--help or --version)
  std::string help;                    // the help or version text when config is nullopt
};

// Parses args (argv without argv[0]) with env's PET_* defaults into a validated config;
// gpus counts the GPUs present for --nproc_per_node gpu/auto (tests inject a fake).
// Throws ConfigError naming the bad value and what was expected.
CommandLine parse_command_line(
    const std::vector<std::string>& args, const Environment& env,
    const GpuProbe& gpus = [] { return probe_gpus(); });

}  // namespace ddp::launcher
