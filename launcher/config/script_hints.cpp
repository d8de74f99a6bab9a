#include "launcher/config/script_hints.hpp"

#include <fstream>

#include "common/env_names.hpp"

namespace ddp::launcher {
namespace {

// Enough for any training script; a larger file is read this far.
constexpr std::streamsize kMaxScriptBytes = std::streamsize{4} << 20;

// The text of the Python script the workers run; nullopt for anything else (a module, a
// program, a script that cannot be read).
std::optional<std::string> python_script_text(const LaunchConfig& config) {
  if (!runs_python(config) || config.module) return std::nullopt;
  std::ifstream in(config.program, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(static_cast<size_t>(kMaxScriptBytes), '\0');
  in.read(text.data(), kMaxScriptBytes);
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

// The spelling the script declares ("local_rank" or "local-rank"), quoted as argparse takes it.
std::optional<std::string> declared_spelling(const std::string& text) {
  for (const char* spelling : {"local_rank", "local-rank"}) {
    for (char quote : {'"', '\''}) {
      std::string literal = std::string(1, quote) + "--" + spelling + quote;
      if (text.find(literal) != std::string::npos) return spelling;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> local_rank_hint(const LaunchConfig& config) {
  if (config.pass_local_rank_arg || config.use_env) return std::nullopt;
  for (const auto& arg : config.program_args) {
    if (arg.starts_with("--local_rank") || arg.starts_with("--local-rank")) return std::nullopt;
  }
  const auto text = python_script_text(config);
  if (!text) return std::nullopt;
  auto spelling = declared_spelling(*text);
  if (!spelling) return std::nullopt;
  std::string flag =
      *spelling == "local_rank" ? "--pass_local_rank_arg" : "--pass_local_rank_arg=local-rank";
  return config.program + " declares a --" + *spelling +
         " argument, which ddplaunch does not pass (as torchrun does not): every rank gets its "
         "default; add " +
         flag +
         " (torch.distributed.launch's behaviour) or read LOCAL_RANK "
         "from the environment";
}

std::optional<std::string> file_timer_hint(const LaunchConfig& config, const Environment& env) {
  if (config.hang_timeout.count() > 0 || env_value(env, env::kEnableFileTimer) == "1") {
    return std::nullopt;
  }
  const auto text = python_script_text(config);
  if (!text || text->find("FileTimerClient") == std::string::npos) return std::nullopt;
  return config.program +
         " uses torch's FileTimerClient, but the file timer is off, so its workers get no " +
         env::kTimerFile + " (a KeyError in os.environ); give --hang_timeout SECONDS, or set " +
         env::kEnableFileTimer + "=1 as under torchrun (docs/hangs.md)";
}

}  // namespace ddp::launcher
