#pragma once
// Runs a program for a multi-process test: stdout and stderr captured, its own process group,
// killed (group and all) at the deadline so a hung run cannot outlive the test.
#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace ddp::trainer::test {

struct ProcessResult {
  int exit_code = -1;  // exit status, 128 + signal when killed by one, -1 on timeout
  bool timed_out = false;
  std::string output;  // stdout and stderr interleaved
};

// Runs argv[0] (a path) with argv; extra_env is added to this process's environment.
ProcessResult run_process(const std::vector<std::string>& argv, std::chrono::seconds timeout,
                          const std::map<std::string, std::string>& extra_env = {});

}  // namespace ddp::trainer::test
