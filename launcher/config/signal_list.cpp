#include "launcher/config/signal_list.hpp"

#include <algorithm>
#include <array>
#include <csignal>
#include <sstream>
#include <utility>

#include "common/error.hpp"

namespace ddp::launcher {
namespace {

// Asynchronous signals whose default action ends a process. Not here: SIGKILL and SIGSTOP
// (no process can catch them), SIGPIPE (the agent turns it into EPIPE for a closed console),
// job control (SIGCHLD, SIGCONT, SIGTSTP, SIGTTIN, SIGTTOU) and the synchronous faults
// (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS), which are about the agent itself.
constexpr std::array<std::pair<const char*, int>, 12> kHandleable = {{
    {"SIGTERM", SIGTERM},
    {"SIGINT", SIGINT},
    {"SIGHUP", SIGHUP},
    {"SIGQUIT", SIGQUIT},
    {"SIGUSR1", SIGUSR1},
    {"SIGUSR2", SIGUSR2},
    {"SIGALRM", SIGALRM},
    {"SIGVTALRM", SIGVTALRM},
    {"SIGPROF", SIGPROF},
    {"SIGXCPU", SIGXCPU},
    {"SIGXFSZ", SIGXFSZ},
    {"SIGPWR", SIGPWR},
}};

std::string trim(const std::string& text) {
  auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

}  // namespace

std::vector<int> parse_signal_list(const std::string& value) {
  std::vector<int> signals;
  std::string unknown;
  std::stringstream items(value);
  std::string item;
  while (std::getline(items, item, ',')) {
    auto name = trim(item);
    if (name.empty()) continue;
    auto known = std::find_if(kHandleable.begin(), kHandleable.end(),
                              [&](const auto& entry) { return name == entry.first; });
    if (known == kHandleable.end()) {
      unknown += (unknown.empty() ? "'" : ", '") + name + "'";
      continue;
    }
    if (std::find(signals.begin(), signals.end(), known->second) == signals.end()) {
      signals.push_back(known->second);
    }
  }
  if (!unknown.empty()) {
    std::string accepted;
    for (const auto& [name, number] : kHandleable) {
      accepted += (accepted.empty() ? "" : ", ") + std::string(name);
    }
    throw ConfigError("--signals_to_handle=" + value + ": " + unknown +
                      " cannot be handled (expected a comma-separated list of " + accepted + ")");
  }
  return signals;
}

std::vector<int> handleable_signals() {
  std::vector<int> signals;
  signals.reserve(kHandleable.size());
  for (const auto& [name, number] : kHandleable) signals.push_back(number);
  return signals;
}

std::string signal_list_names(const std::vector<int>& signals) {
  std::string names;
  for (int sig : signals) {
    auto known = std::find_if(kHandleable.begin(), kHandleable.end(),
                              [&](const auto& entry) { return sig == entry.second; });
    std::string name = known == kHandleable.end() ? std::to_string(sig) : known->first;
    names += (names.empty() ? "" : ",") + name;
  }
  return names;
}

}  // namespace ddp::launcher
