// The agent's state machine, driven by a fake spawner and a fake rendezvous.
#include "launcher/agent/agent.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <thread>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/progress_protocol.hpp"
#include "rendezvous/failure_record.hpp"
#include "rendezvous/store/forwarding_store.hpp"
#include "rendezvous/store/memory_store.hpp"
#include "tests/launcher/agent/agent_harness.hpp"
#include "tests/launcher/agent/fake_workers.hpp"
#include "tests/support/files.hpp"

using namespace ddp::launcher;
using ddp::launcher::testing::FakeRendezvous;
using ddp::launcher::testing::FakeSpawner;
using ddp::launcher::testing::Harness;
using ddp::rendezvous::MembershipChange;

TEST_CASE("all workers exiting 0 is success, and the rendezvous is shut down", "[agent]") {
  Harness h(3);
  h.spawner.on_spawn = [&](size_t i) { h.spawner.exit(i, ExitStatus{}); };
  REQUIRE(h.run() == 0);
  CHECK(h.spawner.workers.size() == 3);
  CHECK(h.rendezvous.shut_down);
  CHECK_FALSE(h.rendezvous.after_failure);  // success: the store host waits at the exit barrier
  for (const auto& worker : h.spawner.workers) CHECK(worker.released);
}

TEST_CASE("a failing worker restarts the whole group with RESTART_COUNT+1", "[agent]") {
  Harness h(2, /*max_restarts=*/2);
  // Rank 1 fails in attempts 0 and 1; everyone succeeds in attempt 2.
  h.spawner.on_spawn = [&](size_t i) {
    bool last_attempt = h.spawner.env(i, "TORCHELASTIC_RESTART_COUNT") == "2";
    if (h.spawner.env(i, "LOCAL_RANK") == "1" && !last_attempt) {
      h.spawner.exit(i, ExitStatus{7, 0});
    } else if (last_attempt) {
      h.spawner.exit(i, ExitStatus{});
    }
  };
  REQUIRE(h.run() == 0);
  REQUIRE(h.restarts == 2);
  REQUIRE(h.spawner.workers.size() == 6);
  std::vector<std::string> counts;
  for (size_t i = 0; i < 6; ++i) counts.push_back(h.spawner.env(i, "TORCHELASTIC_RESTART_COUNT"));
  CHECK(counts == std::vector<std::string>{"0", "0", "1", "1", "2", "2"});
  CHECK(h.rendezvous.calls == 3);  // every restart re-runs the rendezvous
  // The surviving rank 0 of a failed attempt was stopped with SIGTERM.
  CHECK(h.spawner.workers[0].signals == std::vector<int>{SIGTERM});
  CHECK(h.logged(ddp::log::program() + ": worker group failed (rank 1: exit code 7"));
  CHECK(h.logged("restarting, attempt 2 of 2"));
}

TEST_CASE("each attempt's worker namespace is declared before its workers start", "[agent][auth]") {
  Harness h(2, /*max_restarts=*/1);
  std::vector<std::pair<std::string, size_t>> declared;  // prefix, workers spawned by then
  h.options.set_worker_namespace = [&](const std::string& prefix) {
    declared.emplace_back(prefix, h.spawner.workers.size());
  };
  h.spawner.on_spawn = [&](size_t i) {
    const bool first = h.spawner.env(i, "TORCHELASTIC_RESTART_COUNT") == "0";
    h.spawner.exit(i, first && i == 1 ? ExitStatus{3, 0} : ExitStatus{});
  };
  REQUIRE(h.run() == 0);
  CHECK(declared == std::vector<std::pair<std::string, size_t>>{{"/worker/attempt_0/", 0},
                                                                {"/worker/attempt_1/", 2}});
}

TEST_CASE("a namespace that cannot be declared is one warning, the workers still start",
          "[agent][auth]") {
  Harness h(1);
  h.options.set_worker_namespace = [](const std::string&) {
    throw ddp::StoreError("store 127.0.0.1:1: gone");
  };
  h.spawner.on_spawn = [&](size_t i) { h.spawner.exit(i, ExitStatus{}); };
  REQUIRE(h.run() == 0);
  CHECK(h.logged("could not declare the workers' store namespace: store 127.0.0.1:1: gone"));
}

// Puts the log level back at the end of a test, whatever happened in it.
struct LevelGuard {
  ddp::log::Level saved = ddp::log::level();
  ~LevelGuard() { ddp::log::set_level(saved); }
};

TEST_CASE("the agent's lines follow the log level", "[agent][log]") {
  const LevelGuard guard;
  SECTION("debug adds each worker's start and exit") {
    ddp::log::set_level(ddp::log::Level::kDebug);
    Harness h(2);
    h.spawner.on_spawn = [&](size_t i) { h.spawner.exit(i, ExitStatus{}); };
    REQUIRE(h.run() == 0);
    CHECK(h.logged("started rank 1 (local_rank 1) as pid "));
    CHECK(h.logged("rendezvous round 0: group rank 0 of 1"));
    CHECK(h.logged(") exited: "));
  }
  SECTION("error keeps the restart warning out, warn lets it in; info never debug") {
    const auto want =
        GENERATE(ddp::log::Level::kError, ddp::log::Level::kWarn, ddp::log::Level::kInfo);
    ddp::log::set_level(want);
    Harness h(2, /*max_restarts=*/1);
    h.spawner.on_spawn = [&](size_t i) {
      const bool first = h.spawner.env(i, "TORCHELASTIC_RESTART_COUNT") == "0";
      h.spawner.exit(i, first && i == 1 ? ExitStatus{3, 0} : ExitStatus{});
    };
    REQUIRE(h.run() == 0);
    CHECK(h.logged("restarting, attempt 1 of 1") == (want != ddp::log::Level::kError));
    CHECK_FALSE(h.logged("started rank"));
  }
}

TEST_CASE("out of restarts: the root cause's exit code is the agent's", "[agent]") {
  Harness h(2, /*max_restarts=*/1);
  h.spawner.on_spawn = [&](size_t i) {
    if (h.spawner.env(i, "LOCAL_RANK") == "1") h.spawner.exit(i, ExitStatus{42, 0});
  };
  CHECK(h.run() == 42);
  CHECK(h.restarts == 1);
  REQUIRE(h.failures.size() == 1);
  CHECK(h.failures[0].rank == 1);
  CHECK(h.rendezvous.after_failure);
}

TEST_CASE("a worker killed by signal N gives exit status 128+N", "[agent]") {
  Harness h(2);
  h.spawner.on_spawn = [&](size_t i) {
    if (i == 0) h.spawner.exit(i, ExitStatus{0, SIGSEGV});
  };
  CHECK(h.run() == 128 + SIGSEGV);
}

TEST_CASE("a signal to the agent is forwarded once and the agent exits 128+N", "[agent]") {
  Harness h(3);
  h.spawner.on_spawn = [&](size_t i) {
    if (i == 2) h.agent_ptr->handle_signal(SIGUSR1);
  };
  CHECK(h.run() == 128 + SIGUSR1);
  for (const auto& worker : h.spawner.workers) CHECK(worker.signals == std::vector<int>{SIGUSR1});
  CHECK(h.restarts == 0);
}

TEST_CASE("workers ignoring SIGTERM get SIGKILL after the grace period", "[agent]") {
  Harness h(2);
  h.spawner.on_signal = [&](size_t i, int sig) {
    if (sig == SIGKILL) h.spawner.exit(i, ExitStatus{0, SIGKILL});
  };
  h.spawner.on_spawn = [&](size_t i) {
    if (i == 1) h.spawner.exit(i, ExitStatus{1, 0});
  };
  CHECK(h.run() == 1);
  CHECK(h.spawner.workers[0].signals == std::vector<int>{SIGTERM, SIGKILL});
  // Rank 0 was killed by us: it is not listed as a failure of its own.
  REQUIRE(h.failures.size() == 1);
  CHECK(h.failures[0].rank == 1);
}

TEST_CASE("a worker that cannot be started stops the ones already running, exit 127", "[agent]") {
  Harness h(3, /*max_restarts=*/2);
  h.spawner.fail_spawn = [](size_t n) { return n == 1; };  // local_rank 1 of 0..2
  CHECK(h.run() == 127);
  CHECK(h.spawner.spawn_calls == 2);  // local_rank 2 is never tried
  REQUIRE(h.spawner.workers.size() == 1);
  CHECK(h.spawner.workers[0].signals == std::vector<int>{SIGTERM});
  CHECK(h.spawner.workers[0].released);
  CHECK(h.rendezvous.calls == 1);  // no restart from it
  CHECK(h.logged("fake spawn: cannot run the program"));
}

TEST_CASE("a membership change restarts the workers without spending a restart", "[agent]") {
  Harness h(2, /*max_restarts=*/0);
  h.spawner.on_spawn = [&](size_t i) {
    if (h.rendezvous.calls == 1) {
      if (i == 1) h.rendezvous.change(MembershipChange::kNodeWaiting);
    } else {
      h.spawner.exit(i, ExitStatus{});
    }
  };
  CHECK(h.run() == 0);
  CHECK(h.rendezvous.calls == 2);
  CHECK(h.restarts == 0);
  REQUIRE(h.spawner.workers.size() == 4);
  // The attempt number is the new round's (agreed by every node), though no restart was spent.
  CHECK(h.spawner.env(0, "TORCHELASTIC_RESTART_COUNT") == "0");
  CHECK(h.spawner.env(2, "TORCHELASTIC_RESTART_COUNT") == "1");
  CHECK(h.spawner.env(2, "TORCHELASTIC_MAX_RESTARTS") == "0");
}

TEST_CASE("elastic: a worker failure just before a node's loss claim spends no restart",
          "[agent][loss_window]") {
  Harness h(1, /*max_restarts=*/0);
  h.rendezvous.elastic = true;
  h.rendezvous.group_world_size = 2;
  h.spawner.on_spawn = [&](size_t i) {
    if (h.rendezvous.calls == 1) {
      // The peer died: this worker's collective failed a moment before the claim came.
      h.spawner.exit(i, ExitStatus{1, 0});
      h.rendezvous.change(MembershipChange::kNodeLost);
    } else {
      h.spawner.exit(i, ExitStatus{});
    }
  };
  CHECK(h.run() == 0);
  CHECK(h.rendezvous.calls == 2);
  CHECK(h.restarts == 0);
  CHECK(h.logged("just before another node was found lost: taken for the loss's doing"));
}

TEST_CASE("elastic: a worker failure with no loss claim is acted on after the short window",
          "[agent][loss_window]") {
  Harness h(1, /*max_restarts=*/0);
  h.rendezvous.elastic = true;
  h.rendezvous.group_world_size = 2;
  h.spawner.on_spawn = [&](size_t i) { h.spawner.exit(i, ExitStatus{7, 0}); };
  const auto started = std::chrono::steady_clock::now();
  CHECK(h.run() == 7);
  CHECK(h.rendezvous.calls == 1);
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
  CHECK_FALSE(h.logged("taken for the loss's doing"));
}

TEST_CASE("elastic: a store gone silent (unreachable) rejoins as a new node, a closed one ends it",
          "[agent][peer_tolerance]") {
  // The watcher's own error is the only cause there is without a job watch (the benchmark's
  // cut link): "Network is unreachable" is silence, and the node joins the job again.
  Harness h(1, /*max_restarts=*/0);
  h.rendezvous.elastic = true;
  h.rendezvous.group_world_size = 2;
  h.spawner.on_spawn = [&](size_t i) {
    if (h.rendezvous.calls == 1) {
      h.rendezvous.change(MembershipChange::kStoreLost,
                          "lost the rendezvous store: store tcp://10.0.0.1:29400: wait of keys "
                          "'x': receive failed: Network is unreachable (errno 101) (round 0)",
                          ddp::PeerLoss::kSilence);
    } else {
      h.spawner.exit(i, ExitStatus{});
    }
  };
  CHECK(h.run() == 0);
  CHECK(h.rendezvous.calls == 2);
  CHECK(h.restarts == 0);
  CHECK(h.logged("joining the job again as a new node"));

  // A reset is a death: the store host is gone, and so is the job for this node.
  Harness dead(1, /*max_restarts=*/3);
  dead.rendezvous.elastic = true;
  dead.rendezvous.group_world_size = 2;
  dead.spawner.on_spawn = [&](size_t) {
    dead.rendezvous.change(MembershipChange::kStoreLost,
                           "lost the rendezvous store: receive failed: Connection reset by peer",
                           ddp::PeerLoss::kDeath);
  };
  CHECK(dead.run() != 0);
  CHECK(dead.rendezvous.calls == 1);
  CHECK(dead.logged("closed, reset or refused"));
}

TEST_CASE("a rendezvous error ends the agent with a non-zero status", "[agent]") {
  Harness h(2);
  h.rendezvous.fail_on_call = 1;
  CHECK(h.run() != 0);
  CHECK(h.spawner.workers.empty());
  CHECK(h.rendezvous.shut_down);
  CHECK(h.rendezvous.after_failure);  // no exit barrier wait for nodes that may be dead
}

TEST_CASE("a signal during a blocked rendezvous shuts it down and exits 128+N", "[agent]") {
  Harness h(2);
  h.rendezvous.block_until_shutdown = true;
  h.rendezvous.on_call = [&] {
    boost::asio::post(h.io, [&] { h.agent_ptr->handle_signal(SIGTERM); });
  };
  CHECK(h.run() == 128 + SIGTERM);
  CHECK(h.spawner.workers.empty());
  CHECK(h.rendezvous.shut_down);
}

TEST_CASE("a failure report reads the worker's error file", "[agent]") {
  Harness h(2);
  h.spawner.on_spawn = [&](size_t i) {
    if (i != 0) return;
    std::string path = h.spawner.env(i, "TORCHELASTIC_ERROR_FILE");
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fputs(R"({"message": {"message": "ValueError: bad batch", "extraInfo": )"
               R"({"py_callstack": "Traceback: line 3", "timestamp": "1700000000"}}})",
               f);
    std::fclose(f);
    h.spawner.exit(i, ExitStatus{1, 0});
  };
  CHECK(h.run() == 1);
  REQUIRE(h.failures.size() == 1);
  REQUIRE(h.failures[0].error.has_value());
  CHECK(h.failures[0].error->message == "ValueError: bad batch");
  CHECK(h.failures[0].error->traceback == "Traceback: line 3");
}

TEST_CASE("a re-form that brings back the same nodes spends a restart", "[agent]") {
  // A stranger's write (or a peer's failure) made the group re-form, but nothing changed.
  Harness h(1, /*max_restarts=*/1);
  h.rendezvous.members = "0123456789abcdef";
  h.spawner.on_spawn = [&](size_t i) {
    if (h.rendezvous.calls == 1) {
      h.rendezvous.change(MembershipChange::kNodeWaiting);
    } else {
      h.spawner.exit(i, ExitStatus{});
    }
  };
  CHECK(h.run() == 0);
  CHECK(h.restarts == 1);
  CHECK(h.rendezvous.calls == 2);
}

TEST_CASE("same-node re-forms with no restart left end the job instead of looping", "[agent]") {
  Harness h(1, /*max_restarts=*/2);
  h.rendezvous.members = "0123456789abcdef";
  // Every round is disturbed again by a claim (anyone who reaches an open store can make
  // one): without a bound this would restart forever.
  h.spawner.on_spawn = [&](size_t) { h.rendezvous.change(MembershipChange::kNodeWaiting); };
  CHECK(h.run() == 1);
  CHECK(h.restarts == 2);
  CHECK(h.rendezvous.calls == 4);  // the first round and three same-node re-forms
  CHECK(h.rendezvous.after_failure);
}

TEST_CASE("a node lost and back (the same nodes) spends no restart, on any node", "[agent]") {
  // The store verified the loss (a closed connection, a lapsed lease): a real change, even when
  // the lost node comes back and the group has its old members again. Every node counts it the
  // same way: the survivor re-forms after the loss, the lost node after its store fell silent.
  SECTION("a survivor") {
    Harness h(1, /*max_restarts=*/0);
    h.rendezvous.members = "0123456789abcdef";
    h.spawner.on_spawn = [&](size_t i) {
      if (h.rendezvous.calls == 1) {
        h.rendezvous.change(MembershipChange::kNodeLost);
      } else {
        h.spawner.exit(i, ExitStatus{});
      }
    };
    CHECK(h.run() == 0);
    CHECK(h.restarts == 0);
    CHECK(h.rendezvous.calls == 2);
    CHECK_FALSE(h.logged("counting it as restart"));
  }
  SECTION("the node that was cut off") {
    Harness h(1, /*max_restarts=*/0);
    h.rendezvous.elastic = true;
    h.rendezvous.members = "0123456789abcdef";
    h.rendezvous.group_world_size = 2;
    h.spawner.on_spawn = [&](size_t i) {
      if (h.rendezvous.calls == 1) {
        h.rendezvous.change(MembershipChange::kStoreLost, "lost the rendezvous store: timed out",
                            ddp::PeerLoss::kSilence);
      } else {
        h.spawner.exit(i, ExitStatus{});
      }
    };
    CHECK(h.run() == 0);
    CHECK(h.restarts == 0);
    CHECK(h.rendezvous.calls == 2);
    CHECK(h.logged("joining the job again as a new node"));
    CHECK_FALSE(h.logged("counting it as restart"));
  }
}

TEST_CASE("a signal while the store host waits in the exit barrier ends the wait", "[agent]") {
  Harness h(2);
  h.rendezvous.block_exit_until_interrupt = true;
  h.spawner.on_spawn = [&](size_t i) { h.spawner.exit(i, ExitStatus{}); };
  h.rendezvous.on_shutdown = [&] {
    boost::asio::post(h.io, [&] { h.agent_ptr->handle_signal(SIGTERM); });
  };
  CHECK(h.run() == 128 + SIGTERM);
  CHECK(h.rendezvous.interrupted);
}

TEST_CASE("events carry the restart count the workers were given", "[agent]") {
  Harness h(1, /*max_restarts=*/0);
  h.events_path = (h.options.run_dir.string() + ".events");
  h.spawner.on_spawn = [&](size_t i) {
    if (h.rendezvous.calls == 1) {
      h.rendezvous.change(MembershipChange::kNodeWaiting);  // new round, no restart spent
    } else {
      h.spawner.exit(i, ExitStatus{});
    }
  };
  REQUIRE(h.run() == 0);
  std::ifstream in(*h.events_path);
  std::vector<std::string> starts;
  const std::regex count("\"restart_count\":(\\d+)");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (line.find("\"worker_start\"") != std::string::npos && std::regex_search(line, m, count)) {
      starts.push_back(m[1]);
    }
  }
  std::filesystem::remove(*h.events_path);
  CHECK(starts == std::vector<std::string>{"0", "1"});
  CHECK(h.spawner.env(1, "TORCHELASTIC_RESTART_COUNT") == "1");
}

namespace {

// What the fake /proc says of every fake worker.
HangWatch::ProcReader fake_proc(char state) {
  return [state](int pid) -> std::optional<ProcStatus> {
    ProcStatus status;
    status.pid = pid;
    status.state = state;
    return status;
  };
}

void send_progress(const std::string& fifo, int rank, int pid, int64_t step, int64_t seq,
                   ddp::progress::Phase phase) {
  ddp::progress::Report r;
  r.rank = rank;
  r.pid = pid;
  r.step = step;
  r.op = "all_reduce";
  r.seq = seq;
  r.phase = phase;
  const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  REQUIRE(fd >= 0);
  const auto line = ddp::progress::format(r);
  CHECK(::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()));
  ::close(fd);
}

}  // namespace

TEST_CASE("a rank behind the others is dumped (SIGABRT) first, then the group restarts",
          "[agent][hang]") {
  Harness h(2, /*max_restarts=*/1);
  h.options.config.hang_timeout = std::chrono::milliseconds(300);
  h.options.read_proc = fake_proc('S');
  h.events_path = h.options.run_dir.string() + ".hang_events";
  h.spawner.on_spawn = [&](size_t i) {
    if (h.spawner.env(i, "TORCHELASTIC_RESTART_COUNT") == "1") {
      h.spawner.exit(i, ExitStatus{});
      return;
    }
    const auto fifo = h.spawner.env(i, "DDPLAUNCH_PROGRESS_FILE");
    REQUIRE_FALSE(fifo.empty());
    // Rank 0 waits inside all_reduce #3; rank 1 left #2 and never entered #3.
    const bool behind = h.spawner.env(i, "RANK") == "1";
    send_progress(fifo, behind ? 1 : 0, h.spawner.workers[i].pid, 5, behind ? 2 : 3,
                  behind ? ddp::progress::Phase::kExit : ddp::progress::Phase::kEnter);
  };
  REQUIRE(h.run() == 0);
  CHECK(h.restarts == 1);
  REQUIRE(h.spawner.workers.size() == 4);
  CHECK(h.spawner.workers[1].signals.front() == SIGABRT);  // the culprit, asked for its stack
  CHECK(h.spawner.workers[0].signals.front() == SIGTERM);  // the victim, only stopped
  const std::string events = ddp::test::read_file(*h.events_path);
  CHECK_THAT(events,
             Catch::Contains(R"("event":"hang")") && Catch::Contains(R"("scope":"all_reduce #2")"));
  CHECK(std::regex_search(events, std::regex(R"("culprit":true[^\n]*"rank":1)")));
  std::filesystem::remove(*h.events_path);
}

TEST_CASE("a worker still there after SIGKILL (state D) is reported and not waited for",
          "[agent][hang]") {
  Harness h(1);
  h.options.read_proc = fake_proc('D');
  h.events_path = h.options.run_dir.string() + ".hang_events";
  h.spawner.on_signal = [](size_t, int) {};  // nothing ends it
  h.spawner.on_spawn = [&](size_t) { h.agent_ptr->handle_signal(SIGTERM); };
  CHECK(h.run() == 128 + SIGTERM);
  const std::string events = ddp::test::read_file(*h.events_path);
  CHECK_THAT(events,
             Catch::Contains(R"("event":"unkillable")") && Catch::Contains(R"("state":"D")"));
  std::filesystem::remove(*h.events_path);
}

// --- a job of several nodes: the job-wide failure record (docs/multinode.md) ---

namespace {

// The agent of node 0 of a 3-node job, sharing one store with the (simulated) other nodes.
struct JobHarness : Harness {
  explicit JobHarness(int nproc, int max_restarts = 0) : Harness(nproc, max_restarts) {
    rendezvous.job_store = store;
    rendezvous.group_world_size = 3;
  }
  // Another node's failure in attempt `attempt`, as its agent publishes it.
  void fail_elsewhere(uint64_t attempt, int exit_code, int node = 2) const {
    ddp::rendezvous::FailureRecord r;
    r.attempt = attempt;
    r.group_rank = node;
    r.host = "10.0.0.3";
    r.rank = 4;
    r.local_rank = 0;
    r.pid = 77;
    r.exit_code = exit_code;
    r.time = ddp::rendezvous::unix_now();
    r.message = "CUDA error: an illegal memory access";
    ddp::rendezvous::publish_failure(*store, r);
  }
  std::shared_ptr<ddp::rendezvous::MemoryStore> store =
      std::make_shared<ddp::rendezvous::MemoryStore>(std::chrono::seconds(10));
  std::vector<std::shared_ptr<std::function<void()>>> keep;  // callbacks the loop re-posts
};

}  // namespace

TEST_CASE("job: another node's failure stops this node's workers, exit with its code",
          "[agent][job]") {
  JobHarness h(2);
  // The workers keep running until told otherwise; node 2 fails once they all started.
  h.spawner.on_spawn = [&](size_t i) {
    if (i == 1) h.fail_elsewhere(0, 5);
  };
  REQUIRE(h.run() == 5);
  for (const auto& worker : h.spawner.workers) CHECK(worker.signals == std::vector<int>{SIGTERM});
  CHECK(
      h.logged("the job failed on another node: rank 4 (local_rank 0, pid 77) on node 2 "
               "(10.0.0.3): exit code 5: CUDA error"));
  CHECK(h.failures.empty());  // nothing failed here
  CHECK(h.rendezvous.after_failure);
}

namespace {

// A store whose waits never see a key: a failure watch waiting on it never reports, as one
// whose thread a loaded machine keeps from running.
class DeafStore final : public ddp::rendezvous::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  using Store::wait;
  void wait(const std::vector<std::string>& keys, ddp::rendezvous::Duration timeout) override {
    std::this_thread::sleep_for(std::min(timeout, ddp::rendezvous::Duration(20)));
    throw ddp::StoreTimeout("deaf store: " + ddp::rendezvous::join_keys(keys));
  }
};

}  // namespace

TEST_CASE("job: a node that finished exits with a failure recorded during its exit barrier",
          "[agent][job]") {
  // This node hosts the store and its worker finished first. While it waits in the exit
  // barrier, another node's worker fails; that node records it and counts itself out, which
  // ends the barrier, before this node's watch has delivered the record.
  JobHarness h(1);
  h.rendezvous.connect_job = [&](int n) -> std::shared_ptr<ddp::rendezvous::Store> {
    if (n % 2 == 1) return std::make_shared<DeafStore>(h.store);  // the watch's connection
    return h.store;
  };
  h.rendezvous.on_shutdown = [&] { h.fail_elsewhere(0, 3); };
  h.spawner.on_spawn = [&](size_t i) { h.spawner.exit(i, ExitStatus{}); };
  CHECK(h.run() == 3);
  CHECK(
      h.logged("the job failed on another node after this node's workers finished: rank 4 "
               "(local_rank 0, pid 77) on node 2 (10.0.0.3): exit code 3"));
  CHECK_FALSE(h.rendezvous.after_failure);  // it left as a node that finished
}

TEST_CASE("job: the job's store is connected off the loop, which handles a signal meanwhile",
          "[agent][job][signal]") {
  // Connecting to a store that does not answer takes seconds (a connect timeout per
  // connection). The agent's loop must go on serving signals, exits and timers meanwhile: the
  // connect here blocks until the agent has handled a SIGTERM (or 5 s, were the loop blocked).
  JobHarness h(1);
  std::mutex mu;
  std::condition_variable cv;
  bool signalled = false;
  bool handled_while_connecting = false;
  h.on_event = [&](const nlohmann::json& event) {
    if (event.value("event", "") != "signal") return;
    std::lock_guard<std::mutex> lock(mu);
    signalled = true;
    cv.notify_all();
  };
  h.rendezvous.connect_job = [&](int n) -> std::shared_ptr<ddp::rendezvous::Store> {
    if (n == 1) {
      boost::asio::post(h.io, [&] { h.agent_ptr->handle_signal(SIGTERM); });
      std::unique_lock<std::mutex> lock(mu);
      handled_while_connecting =
          cv.wait_for(lock, std::chrono::seconds(5), [&] { return signalled; });
    }
    return h.store;
  };
  h.spawner.on_spawn = [&](size_t i) { h.spawner.exit(i, ExitStatus{}); };
  CHECK(h.run() == 128 + SIGTERM);
  CHECK(handled_while_connecting);
  CHECK(h.spawner.workers.empty());  // the round it connected for never started workers
}

TEST_CASE("job: a failure here is published, and every node restarts together", "[agent][job]") {
  JobHarness h(2, /*max_restarts=*/1);
  h.spawner.on_spawn = [&](size_t i) {
    const bool first_attempt = h.spawner.env(i, "TORCHELASTIC_RESTART_COUNT") == "0";
    if (first_attempt && h.spawner.env(i, "LOCAL_RANK") == "1") h.spawner.exit(i, ExitStatus{7, 0});
    if (!first_attempt) h.spawner.exit(i, ExitStatus{});
  };
  REQUIRE(h.run() == 0);
  CHECK(h.restarts == 1);
  const auto record = ddp::rendezvous::decode_failure(h.store->get("failure/0"));
  CHECK(record.kind == "worker");
  CHECK(record.rank == 1);
  CHECK(record.exit_code == 7);
  CHECK(record.group_rank == 0);
  CHECK_FALSE(h.store->check({"failure/1"}));
  CHECK(h.logged("restarting every node, attempt 1 of 1"));
}

TEST_CASE("job: the first record wins, so a node whose workers died of it names the other",
          "[agent][job]") {
  JobHarness h(1);
  h.spawner.on_spawn = [&](size_t i) {
    // Node 2 failed first; this node's worker then dies in a collective with its peer gone.
    h.fail_elsewhere(0, 3);
    h.spawner.exit(i, ExitStatus{1, 0});
  };
  REQUIRE(h.run() == 3);  // the root cause's code, not this worker's 1
  const auto record = ddp::rendezvous::decode_failure(h.store->get("failure/0"));
  CHECK(record.group_rank == 2);
}

TEST_CASE("job: a store host that finished and leaves is not a failure", "[agent][job]") {
  JobHarness h(1);
  h.spawner.on_spawn = [&](size_t i) {
    // Node 1 hosts the store; it waits until this node (group rank 0) acknowledged.
    ddp::rendezvous::announce_store_leaving(*h.store, 0, 1, "10.0.0.2", {0},
                                            std::chrono::seconds(10));
    CHECK(h.store->check({ddp::rendezvous::store_leaving_ack_key(0, 0)}));
    // This node's worker goes on to its end once the agent heard the announcement.
    auto finish_when_heard = std::make_shared<std::function<void()>>();
    *finish_when_heard = [&h, i, weak = std::weak_ptr(finish_when_heard)] {
      if (h.logged("which hosts the store, finished and is leaving")) {
        h.spawner.exit(i, ExitStatus{});
      } else if (auto again = weak.lock()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        boost::asio::post(h.io, [again] { (*again)(); });
      }
    };
    h.keep.push_back(finish_when_heard);
    boost::asio::post(h.io, *finish_when_heard);
  };
  REQUIRE(h.run() == 0);
  CHECK(h.spawner.workers.at(0).signals.empty());
  CHECK(h.logged("which hosts the store, finished and is leaving"));
  CHECK_FALSE(h.rendezvous.shut_down);  // nothing left to leave
}

TEST_CASE("job: a signal to this agent stops the other nodes too", "[agent][job]") {
  JobHarness h(1);
  h.spawner.on_spawn = [&](size_t) { h.agent_ptr->handle_signal(SIGTERM); };
  REQUIRE(h.run() == 128 + SIGTERM);
  const auto record = ddp::rendezvous::decode_failure(h.store->get("failure/0"));
  CHECK(record.kind == "agent_signal");
  CHECK(record.signal == SIGTERM);
  CHECK(record.shell_status() == 128 + SIGTERM);
}

TEST_CASE("job: another node's agent told to stop is not restarted from, even with restarts",
          "[agent][job]") {
  JobHarness h(1, /*max_restarts=*/1);
  h.spawner.on_spawn = [&](size_t i) {
    if (h.spawner.env(i, "TORCHELASTIC_RESTART_COUNT") != "0") {
      h.spawner.exit(i, ExitStatus{});  // a second attempt nobody else would join
      return;
    }
    ddp::rendezvous::FailureRecord r;
    r.kind = "agent_signal";
    r.attempt = 0;
    r.group_rank = 2;
    r.host = "10.0.0.3";
    r.signal = SIGTERM;
    r.message = "SIGTERM";
    ddp::rendezvous::publish_failure(*h.store, r);
  };
  CHECK(h.run() == 128 + SIGTERM);
  CHECK(h.restarts == 0);
}

TEST_CASE("job: a worker that cannot be started is published, and nobody restarts from it",
          "[agent][job]") {
  JobHarness h(2, /*max_restarts=*/2);
  h.spawner.fail_spawn = [](size_t n) { return n == 1; };  // local_rank 1 of attempt 0
  CHECK(h.run() == 127);
  const auto record = ddp::rendezvous::decode_failure(h.store->get("failure/0"));
  CHECK(record.exit_code == 127);
  CHECK(record.final);
  CHECK_FALSE(record.restartable());
}

TEST_CASE("job: a job that can no longer restart gives up with the root cause, no restart spent",
          "[agent][job]") {
  // A static node finished before this node's worker failed: its ranks never come back. The
  // agent asks before it spends or announces a restart, and ends with the worker's code.
  JobHarness h(2, /*max_restarts=*/2);
  h.rendezvous.blocker =
      "node 1 already finished (its workers succeeded) and a static job cannot restart without it";
  h.spawner.on_spawn = [&](size_t i) {
    if (h.spawner.env(i, "LOCAL_RANK") == "1") h.spawner.exit(i, ExitStatus{3, 0});
  };
  REQUIRE(h.run() == 3);
  CHECK(h.restarts == 0);
  CHECK(h.rendezvous.calls == 1);
  CHECK(h.rendezvous.restart_blocker_calls == 1);
  CHECK(
      h.logged("exit code 3) and cannot restart (2 restarts left, none spent): node 1 already "
               "finished"));
  CHECK_FALSE(h.logged("restarting"));
  CHECK(h.rendezvous.after_failure);
}

TEST_CASE("job: the rendezvous is asked whether the job can restart only while a restart is left",
          "[agent][job]") {
  JobHarness spent(1, /*max_restarts=*/0);
  spent.rendezvous.blocker = "node 1 already finished";
  spent.spawner.on_spawn = [&](size_t i) { spent.spawner.exit(i, ExitStatus{3, 0}); };
  REQUIRE(spent.run() == 3);
  CHECK(spent.rendezvous.restart_blocker_calls == 0);
  CHECK_FALSE(spent.logged("cannot restart"));

  // Nothing in the way: one restart spent, asked once for the failed attempt.
  JobHarness unblocked(1, /*max_restarts=*/1);
  unblocked.spawner.on_spawn = [&](size_t i) {
    const bool first = unblocked.spawner.env(i, "TORCHELASTIC_RESTART_COUNT") == "0";
    unblocked.spawner.exit(i, first ? ExitStatus{3, 0} : ExitStatus{});
  };
  REQUIRE(unblocked.run() == 0);
  CHECK(unblocked.restarts == 1);
  CHECK(unblocked.rendezvous.restart_blocker_calls == 1);
}

TEST_CASE("job: a signal while the restart check is out ends the agent with no restart spent",
          "[agent][job][signal]") {
  JobHarness h(1, /*max_restarts=*/2);
  h.spawner.on_spawn = [&](size_t i) {
    if (h.spawner.env(i, "TORCHELASTIC_RESTART_COUNT") == "0") h.spawner.exit(i, ExitStatus{3, 0});
  };
  // The workers are stopped and the rendezvous is asked whether the job can restart: SIGTERM
  // arrives before the (slow) answer.
  h.rendezvous.on_restart_blocker = [&] {
    boost::asio::post(h.io, [&] { h.agent_ptr->handle_signal(SIGTERM); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  };
  CHECK(h.run() == 128 + SIGTERM);
  CHECK(h.restarts == 0);
  CHECK(h.rendezvous.calls == 1);
  CHECK_FALSE(h.logged("restarting every node"));
}

TEST_CASE("job: a signal in the restart check never waits for a next round that does not form",
          "[agent][job][signal]") {
  JobHarness h(1, /*max_restarts=*/2);
  h.spawner.on_spawn = [&](size_t i) {
    if (h.spawner.env(i, "TORCHELASTIC_RESTART_COUNT") == "0") h.spawner.exit(i, ExitStatus{3, 0});
  };
  // Were a restart started, its round would block until shut down: only the watchdog below
  // would end it.
  h.rendezvous.on_call = [&] {
    if (h.rendezvous.calls == 2) h.rendezvous.block_until_shutdown = true;
  };
  h.rendezvous.on_restart_blocker = [&] {
    boost::asio::post(h.io, [&] { h.agent_ptr->handle_signal(SIGTERM); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    boost::asio::post(h.io, [&] { h.agent_ptr->handle_signal(SIGTERM); });  // and a second one
  };
  std::atomic<bool> stuck{false};
  std::thread watchdog([&] {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    if (!h.rendezvous.shut_down) {
      stuck = true;
      h.rendezvous.shutdown();
    }
  });
  const int status = h.run();
  watchdog.join();
  CHECK_FALSE(stuck);
  CHECK(status == 128 + SIGTERM);
}
