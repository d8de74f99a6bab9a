#pragma once
// One-line hints at start, read from a Python script's text (never by importing it), for
// scripts written for another launcher's defaults that would otherwise fail or misbehave
// without saying why:
//  - torch.distributed.launch-era scripts declare a `--local_rank` argument and pick their GPU
//    with it; run without --pass_local_rank_arg every rank gets its default (all on GPU 0);
//  - scripts using torchrun's file timer (`FileTimerClient`) read TORCHELASTIC_TIMER_FILE,
//    which is set only when the file timer is served (--hang_timeout, or
//    TORCHELASTIC_ENABLE_FILE_TIMER=1 as under torchrun); without it they die of a KeyError.
#include <optional>
#include <string>

#include "common/environment.hpp"
#include "launcher/config/launch_config.hpp"

namespace ddp::launcher {

// The --local_rank hint, when the program is a Python script whose text names "--local_rank"
// (or "--local-rank") as a string literal, and neither --pass_local_rank_arg nor the program's
// own arguments give it one, and --use_env did not say so on purpose; nullopt otherwise.
std::optional<std::string> local_rank_hint(const LaunchConfig& config);
// The file-timer hint, when the program is a Python script whose text names FileTimerClient
// and the agent will not serve the file timer (no --hang_timeout, and env's
// TORCHELASTIC_ENABLE_FILE_TIMER is not "1"); nullopt otherwise.
std::optional<std::string> file_timer_hint(const LaunchConfig& config, const Environment& env);

}  // namespace ddp::launcher
