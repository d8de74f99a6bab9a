#pragma once
// The store server of the benchmark, in a child process of its own: its connections count
// against the child's fd limit, the simulated agents' against the parent's, so 16k agents
// fit where one process may hold 20k descriptors (and the store host is another agent anyway).
#include <sys/types.h>

#include <cstdint>

namespace ddp::bench {

class ServerProcess {
 public:
  // Forks (call it before any thread exists) a child serving on 127.0.0.1, port 0; returns
  // once it listens. Throws std::runtime_error when the child does not come up.
  ServerProcess();
  // Closes the control pipe (the child stops its server and exits) and reaps the child.
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  [[nodiscard]] uint16_t port() const { return port_; }
  // CPU seconds (user + system) the server process has used so far.
  [[nodiscard]] double cpu_seconds() const;

 private:
  void shut();

  pid_t pid_ = -1;
  int control_ = -1;  // write end; its EOF tells the child to stop
  uint16_t port_ = 0;
};

}  // namespace ddp::bench
