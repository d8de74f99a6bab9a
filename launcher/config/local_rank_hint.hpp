#pragma once
// Scripts written for torch.distributed.launch declare a `--local_rank` argument and pick their
// GPU with it. Run without --pass_local_rank_arg they get its default on every rank (all on
// GPU 0), silently; one line at start says why and what to do.
#include <optional>
#include <string>

#include "launcher/config/launch_config.hpp"

namespace ddp::launcher {

// The hint, when the program is a Python script whose text names "--local_rank" (or
// "--local-rank") as a string literal, and neither --pass_local_rank_arg nor the program's own
// arguments give it one, and --use_env did not say so on purpose; nullopt otherwise. Reads the
// script's text only (no import).
std::optional<std::string> local_rank_hint(const LaunchConfig& config);

}  // namespace ddp::launcher
