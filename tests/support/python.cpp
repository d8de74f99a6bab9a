#include "tests/support/python.hpp"

#include <chrono>

#include "tests/support/process.hpp"

namespace ddp::test {

bool python_can_import(const std::string& module) {
  ChildOptions options;
  options.argv = {kPython, "-c", "import " + module};
  // Importing torch takes seconds on a busy machine; 120 s only guards against a hang.
  return run_process(options, std::chrono::seconds(120)).exit_code == 0;
}

}  // namespace ddp::test
