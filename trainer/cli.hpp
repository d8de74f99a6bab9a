#pragma once
// The `train` command line (CLI11) -> TrainOptions.
#include <optional>

#include "trainer/train_options.hpp"

namespace ddp::trainer {

// Parses argv. Returns nullopt when --help or --version was printed (the caller exits 0); throws
// ConfigError with CLI11's message and the offending flag for anything unparseable or invalid.
std::optional<TrainOptions> parse_command_line(int argc, const char* const* argv);

}  // namespace ddp::trainer
