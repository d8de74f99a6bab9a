#pragma once
// The init pattern at scale: N ranks (rank_script.hpp), each with its own TCP connection,
// all driven by one thread over one epoll set, against any server of PyTorch's 2.2+ dialect.
// The ranks start together (as a launcher starts them); at most `window` of them are
// connecting at a time (connect issued, PING not answered yet), so the listen backlog never
// overflows: a dropped SYN would cost its rank TCP's 1 s retransmission, which measures the
// kernel's timer instead of the server.
#include <cstdint>
#include <string>
#include <vector>

#include "rank_script.hpp"

namespace ddp::bench {

struct InitLoadOptions {
  std::string host = "127.0.0.1";  // an IPv4 address
  uint16_t port = 0;
  InitPattern pattern;
  int window = 1024;  // connections being set up at once
  // Source addresses the connections are spread over: 127.0.0.1 .. 127.0.0.<sources> (host
  // on loopback only). Each has ~28k ephemeral ports, and the kernel's search for a free port
  // slows as one address fills up; real ranks come from thousands of hosts.
  int sources = 4;
  int stall_seconds = 60;  // no progress for this long: fail, naming how far the ranks got
  // The server's process, when known: its CPU time is read at the start and when the last
  // rank is through, before any connection closes (closing 16k of them costs the server
  // more than some whole phases).
  int server_pid = 0;
};

// When each rank finished each phase, in seconds since the start.
struct RankTimes {
  float connect_started = 0;  // its connect() was issued (window permitting)
  float connected = 0;        // PING answered
  float initialized = 0;      // init counter added (rank 0: saw all N)
  float exchanged = 0;        // read the address keys it needs
  float done = 0;             // through the barrier
};

struct InitLoadResult {
  std::vector<RankTimes> ranks;
  double seconds = 0;              // start until the last rank is through
  double cpu_seconds = 0;          // this process's user + system time meanwhile
  double server_cpu_seconds = -1;  // the server's, when its pid was given
};

// Runs the pattern once. Throws StoreError on a failed connection, a wrong reply, a server
// that closed a connection, or no progress for stall_seconds.
InitLoadResult run_init_load(const InitLoadOptions& options);

}  // namespace ddp::bench
