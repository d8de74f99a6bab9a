#include "rendezvous/store/server/server_loop.hpp"

#include <cstdio>

namespace ddp::rendezvous {

void log_line(const std::string& log_name, const std::string& what) {
  const std::string line = log_name + ": " + what + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace ddp::rendezvous
