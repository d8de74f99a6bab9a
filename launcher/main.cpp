// ddplaunch: parse the command line, then hand everything to run_launcher().
#include <cstdio>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "launcher/launcher.hpp"

extern char** environ;

int main(int argc, char** argv) {
  ddp::log::init("ddplaunch");
  std::vector<std::string> args(argv + 1, argv + argc);
  return ddp::launcher::run_launcher(args, ddp::launcher::capture_environment(environ));
}
