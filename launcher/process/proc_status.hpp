#pragma once
// What /proc says about a process and its threads: the floor of hang detection, and how the
// agent finds the daemons it adopted (adopted_processes.cpp). A worker
// stopped (T) or stuck in the kernel (D) makes no progress whatever it would report; the
// wait channel of each thread says where it waits.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::launcher {

struct ThreadStatus {
  int tid = 0;
  char state = 0;     // as ProcStatus::state
  std::string wchan;  // kernel function it waits in; "" when running or unreadable
  std::string name;   // comm, as the thread named itself
};

struct ProcStatus {
  int pid = 0;
  // /proc's state letter: 'R' running, 'S' sleeping, 'D' uninterruptible (disk, driver),
  // 'T' stopped (SIGSTOP), 't' traced, 'Z' zombie, 'X', 'I' ...; 0 when the process
  // vanished while it was being read (threads then holds what was read before).
  char state = 0;
  std::vector<ThreadStatus> threads;  // by tid
};

// /proc/<pid>: the process's state and each thread's. nullopt when there is no such process
// (never was, or already reaped) or /proc cannot be read; a zombie reads as 'Z'. Threads
// that end during the read are left out.
std::optional<ProcStatus> read_proc_status(int pid);
// One line per thread, "tid 1234 (python3) state D wchan futex_wait_queue" ('-' for no
// wchan), joined by '\n' (no final newline); after 64 threads, one line counting the rest.
// A process that vanished reads "pid 1234 gone".
std::string describe(const ProcStatus& status);
// The comm, state and (when ppid is given) parent, and (when pgrp is given too) process group
// of a /proc/<pid>/stat line: "1234 (a (b) c) S 1 1234 ..." -> "a (b) c", 'S', 1, 1234 (comm is
// cut at the last ')', since it may hold spaces and parentheses). false when the text is not
// such a line.
bool parse_proc_stat(std::string_view text, std::string* comm, char* state, int* ppid = nullptr,
                     int* pgrp = nullptr);

// /proc/<pid>/stat read and parsed: the one reader of it (adopted daemons, hang detection).
struct ProcStat {
  std::string comm;
  char state = 0;
  int ppid = 0;
  int pgrp = 0;  // its process group
};
std::optional<ProcStat> read_proc_stat(int pid);

}  // namespace ddp::launcher
