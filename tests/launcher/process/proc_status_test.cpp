// proc_status, in process: the stat line parser (comm with spaces and parentheses), this
// process's own threads, and a pid that cannot exist. Stopped and vanished children are in
// hang_process_test.cpp.
#include "launcher/process/proc_status.hpp"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <climits>
#include <condition_variable>
#include <mutex>
#include <thread>

using namespace ddp::launcher;

TEST_CASE("parse_proc_stat finds comm and state whatever the name holds", "[proc_status]") {
  std::string comm;
  char state = 0;
  REQUIRE(parse_proc_stat("1234 (python3) S 1 1234 1234 0 -1 4194560 ...\n", &comm, &state));
  CHECK(comm == "python3");
  CHECK(state == 'S');
  REQUIRE(parse_proc_stat("77 (a) (b c)) D 1 2 3", &comm, &state));
  CHECK(comm == "a) (b c)");
  CHECK(state == 'D');
  REQUIRE(parse_proc_stat("5 () T 1", &comm, &state));
  CHECK(comm.empty());
  CHECK(state == 'T');
  CHECK_FALSE(parse_proc_stat("", &comm, &state));
  CHECK_FALSE(parse_proc_stat("5 (name", &comm, &state));
  CHECK_FALSE(parse_proc_stat("5 (name)", &comm, &state));
  CHECK_FALSE(parse_proc_stat("5 )name( S", &comm, &state));
  int ppid = -1;
  REQUIRE(parse_proc_stat("77 (a) (b c)) Z 4321 2 3", &comm, &state, &ppid));
  CHECK(ppid == 4321);
  CHECK_FALSE(parse_proc_stat("5 (x) S", &comm, &state, &ppid));  // no parent field
  int pgrp = -1;
  REQUIRE(parse_proc_stat("77 (a) (b c)) S 4321 77 3", &comm, &state, &ppid, &pgrp));
  CHECK(ppid == 4321);
  CHECK(pgrp == 77);
  CHECK_FALSE(parse_proc_stat("5 (x) S 1", &comm, &state, &ppid, &pgrp));  // no group field
  // This process, read back: its parent is the one getppid() names.
  const auto self = read_proc_stat(::getpid());
  REQUIRE(self.has_value());
  CHECK(self->ppid == ::getppid());
  CHECK(self->pgrp == ::getpgrp());
  CHECK(self->state == 'R');
  CHECK_FALSE(read_proc_stat(0).has_value());
}

TEST_CASE("read_proc_status lists this process's threads, names and states", "[proc_status]") {
  std::mutex mutex;
  std::condition_variable wake;
  bool named = false;
  bool done = false;
  std::thread sleeper([&] {
    // A name with the characters that break naive parsers (15 bytes at most).
    pthread_setname_np(pthread_self(), "w) (x y");
    std::unique_lock<std::mutex> lock(mutex);
    named = true;
    wake.notify_all();
    wake.wait(lock, [&] { return done; });
  });
  {
    std::unique_lock<std::mutex> lock(mutex);
    wake.wait(lock, [&] { return named; });
  }
  auto status = read_proc_status(::getpid());
  {
    std::lock_guard<std::mutex> lock(mutex);
    done = true;
  }
  wake.notify_all();
  sleeper.join();

  REQUIRE(status);
  CHECK(status->pid == ::getpid());
  CHECK(status->state == 'R');  // we are reading it
  REQUIRE(status->threads.size() >= 2);
  CHECK(status->threads[0].tid == ::getpid());  // sorted: the main thread first
  CHECK(status->threads[0].state == 'R');
  const ThreadStatus* sleeper_status = nullptr;
  for (const auto& thread : status->threads) {
    if (thread.name == "w) (x y") sleeper_status = &thread;
  }
  REQUIRE(sleeper_status != nullptr);
  // Waiting on the condition variable (a futex), or just about to.
  CHECK((sleeper_status->state == 'S' || sleeper_status->state == 'R'));

  std::string text = describe(*status);
  INFO(text);
  CHECK_THAT(text, Catch::StartsWith("tid " + std::to_string(::getpid()) + " ("));
  CHECK_THAT(text,
             Catch::Contains("tid " + std::to_string(sleeper_status->tid) + " (w) (x y) state "));
  CHECK_THAT(text, Catch::Contains(" wchan "));
}

TEST_CASE("read_proc_status: no such process is nullopt", "[proc_status]") {
  CHECK_FALSE(read_proc_status(INT_MAX));  // above any pid_max
  CHECK_FALSE(read_proc_status(0));
  CHECK_FALSE(read_proc_status(-1));
}

TEST_CASE("describe: one line per thread, a count past 64, and gone processes", "[proc_status]") {
  ProcStatus status;
  status.pid = 10;
  status.state = 'D';
  status.threads.push_back({10, 'D', "io_schedule", "python3"});
  status.threads.push_back({11, 'S', "", "pt_autograd_0"});
  CHECK(describe(status) ==
        "tid 10 (python3) state D wchan io_schedule\ntid 11 (pt_autograd_0) state S wchan -");
  for (int i = 0; i < 100; ++i) status.threads.push_back({100 + i, 'S', "futex_wait", "t"});
  std::string many = describe(status);
  CHECK(std::count(many.begin(), many.end(), '\n') == 64);
  CHECK_THAT(many, Catch::EndsWith("... and 38 more threads"));
  status.state = 0;
  CHECK(describe(status) == "pid 10 gone");
}
