#include "tests/support/python.hpp"

namespace ddp::test {

ProcessResult run_python(const std::vector<std::string>& args, std::chrono::milliseconds timeout) {
  std::vector<std::string> argv{kPython};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(std::move(argv), timeout);
}

bool python_can_import(const std::string& module) {
  // Importing torch takes seconds on a busy machine; 120 s only guards against a hang.
  return run_python({"-c", "import " + module}, std::chrono::seconds(120)).exit_code == 0;
}

}  // namespace ddp::test
