#pragma once
// The whole ddplaunch program behind main(): command line -> guardian -> rendezvous (and
// the hosted store) -> agent -> exit status. main.cpp only collects argv and environ.
#include <string>
#include <vector>

#include "launcher/config/launch_config.hpp"

namespace ddp::launcher {

// environ as a map (main passes the process's own environment).
Environment capture_environment(char** envp);
// Runs ddplaunch with args (argv without argv[0]); returns the process exit status:
// 0 success, the root-cause worker's status, 128+N after signal N, 2 for bad flags.
int run_launcher(const std::vector<std::string>& args, const Environment& env);

}  // namespace ddp::launcher
