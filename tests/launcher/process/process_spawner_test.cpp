// ProcessSpawner on its own, with real children (/bin/sh): argv and environment as given,
// both streams delivered before the exit status, signals to the worker's group or to it
// alone, release and the destructor killing what is left, an exec failure, the recovery
// channel as descriptor 3 and nothing else inherited, output held back while the console is
// congested, and the daemons a worker started outside its group (stop_escaped).
#include "launcher/process/process_spawner.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "tests/support/io_loop.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/wait_until.hpp"

using namespace ddp::launcher;
using Catch::Matchers::Contains;
using ddp::test::process_alive;
using ddp::test::run_for;
using ddp::test::run_until;
using ddp::test::wait_until;
using namespace std::chrono_literals;

namespace {

constexpr auto kGuard = 20s;

// What came back from one worker.
struct Seen {
  std::string out;
  std::string err;
  std::optional<ExitStatus> status;
  std::string out_at_exit;  // what stdout had delivered when the exit was reported
  std::string err_at_exit;
};

// The spawner on a loop the test runs, and what each worker (by pid) sent back.
struct Bench {
  explicit Bench(bool adopt_daemons = false)
      : spawner(std::make_unique<ProcessSpawner>(io, nullptr, adopt_daemons)) {}

  // Starts /bin/sh -c script (argv[0] sh, then args) with env.
  int sh(const std::string& script, std::vector<std::string> args = {},
         std::vector<std::string> env = {"PATH=/usr/bin:/bin"}, int channel_fd = -1) {
    WorkerProcessSpec spec;
    spec.argv = {"/bin/sh", "-c", script, "sh"};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.env = std::move(env);
    spec.channel_fd = channel_fd;
    return spawn(spec);
  }
  int spawn(const WorkerProcessSpec& spec) {
    auto seen = std::make_shared<Seen>();
    WorkerCallbacks callbacks;
    callbacks.on_output = [seen](int stream, std::string_view bytes) {
      (stream == 1 ? seen->out : seen->err).append(bytes);
    };
    callbacks.on_exit = [seen](ExitStatus status) {
      seen->status = status;
      seen->out_at_exit = seen->out;
      seen->err_at_exit = seen->err;
    };
    if (ready_for_output) callbacks.ready_for_output = ready_for_output;
    const int pid = spawner->spawn(spec, std::move(callbacks));
    workers[pid] = seen;
    return pid;
  }
  // Runs the loop until worker pid's exit was reported; its status.
  ExitStatus await_exit(int pid) {
    REQUIRE(run_until(
        io, [&] { return workers.at(pid)->status.has_value(); }, kGuard));
    return *workers.at(pid)->status;
  }
  // Runs the loop until worker pid's stdout holds a whole first line; that line.
  std::string first_line(int pid) {
    REQUIRE(run_until(
        io, [&] { return workers.at(pid)->out.find('\n') != std::string::npos; }, kGuard));
    const auto& out = workers.at(pid)->out;
    return out.substr(0, out.find('\n'));
  }
  Seen& operator[](int pid) { return *workers.at(pid); }

  boost::asio::io_context io;
  std::function<bool(int stream)> ready_for_output;
  std::map<int, std::shared_ptr<Seen>> workers;
  std::unique_ptr<ProcessSpawner> spawner;
};

// /proc/<pid>/comm ("" once it is gone).
std::string comm_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool gone(pid_t pid) {
  return wait_until([pid] { return !process_alive(pid); }, kGuard);
}

}  // namespace

TEST_CASE("process spawner: a worker's output on both streams arrives before its exit status",
          "[process_spawner]") {
  Bench b;
  const int pid = b.sh("echo out; echo err >&2; head -c 200000 /dev/zero | tr '\\0' x; exit 3");
  CHECK(pid > 0);
  const auto status = b.await_exit(pid);
  CHECK(status.exit_code == 3);
  CHECK(status.signal == 0);
  CHECK(b[pid].out_at_exit.size() == 4 + 200000);
  CHECK(b[pid].out_at_exit.starts_with("out\n"));
  CHECK(b[pid].err_at_exit == "err\n");
}

TEST_CASE("process spawner: the worker gets exactly the argv and environment it was given",
          "[process_spawner]") {
  Bench b;
  // Not the test's environment: HOME and PATH are what the spec says (none, and this).
  const int pid = b.sh("echo \"$# $1 $2 FOO=$FOO HOME=${HOME-unset} PATH=$PATH\"", {"a b", "c"},
                       {"FOO=bar", "PATH=/bin"});
  b.await_exit(pid);
  CHECK(b[pid].out == "2 a b c FOO=bar HOME=unset PATH=/bin\n");
}

TEST_CASE("process spawner: a worker killed by a signal is reported so", "[process_spawner]") {
  Bench b;
  const int pid = b.sh("echo ready; exec sleep 30");
  CHECK(b.first_line(pid) == "ready");
  b.spawner->signal_process(pid, SIGTERM);
  const auto status = b.await_exit(pid);
  CHECK(status.signal == SIGTERM);
  CHECK(status.shell_status() == 128 + SIGTERM);
}

TEST_CASE("process spawner: signal_group reaches the worker's children, signal_process only it",
          "[process_spawner]") {
  Bench b;
  const int pid = b.sh("sleep 30 & echo $!; wait");
  const pid_t child = std::stoi(b.first_line(pid));
  REQUIRE(process_alive(child));
  SECTION("the group") {
    b.spawner->signal_group(pid, SIGTERM);
    CHECK(b.await_exit(pid).signal == SIGTERM);
    CHECK(gone(child));
  }
  SECTION("the worker alone; release takes what it left") {
    b.spawner->signal_process(pid, SIGTERM);
    CHECK(b.await_exit(pid).signal == SIGTERM);
    CHECK(process_alive(child));
    b.spawner->release(pid);
    CHECK(gone(child));
  }
}

TEST_CASE("process spawner: an exit is reported though a child left behind holds its pipes",
          "[process_spawner]") {
  Bench b;
  // The worker (a wrapper) exits at once; its child keeps stdout and stderr open.
  const int pid = b.sh("sleep 30 & echo $!");
  const auto status = b.await_exit(pid);
  CHECK(status.success());
  const pid_t child = std::stoi(b[pid].out);
  CHECK(process_alive(child));
  b.spawner->release(pid);
  CHECK(gone(child));
}

TEST_CASE("process spawner: signals reach only the workers it knows", "[process_spawner]") {
  ddp::test::ChildOptions o;
  o.argv = {"/bin/sleep", "30"};
  ddp::test::ChildProcess stranger(o);
  Bench b;
  const int pid = b.sh("exit 0");
  b.await_exit(pid);
  b.spawner->release(pid);
  b.spawner->signal_group(stranger.pid(), SIGKILL);
  b.spawner->signal_process(stranger.pid(), SIGKILL);
  b.spawner->release(stranger.pid());
  CHECK_FALSE(stranger.wait_for(100ms).has_value());  // still running
}

TEST_CASE("process spawner: a program that cannot be run exits 127 and says why",
          "[process_spawner]") {
  Bench b;
  WorkerProcessSpec spec;
  spec.argv = {"/nonexistent/train"};
  const int pid = b.spawn(spec);
  CHECK(b.await_exit(pid).exit_code == 127);
  CHECK(b[pid].err == "ddplaunch: exec failed: /nonexistent/train: errno 2\n");
  spec.argv.clear();
  CHECK_THROWS_AS(b.spawn(spec), ddp::Error);
}

TEST_CASE("process spawner: the recovery channel is descriptor 3, and nothing else is inherited",
          "[process_spawner]") {
  // A descriptor of the agent's that is not close-on-exec must not reach the worker either.
  const int opened = ::open("/dev/null", O_RDONLY);
  const int leaked = ::fcntl(opened, F_DUPFD, 20);
  ::close(opened);
  REQUIRE(leaked >= 20);
  Bench b;
  // The shell's own descriptors (a pipeline would add its pipes).
  const std::string list_fds = "ls /proc/$$/fd";
  SECTION("with a channel") {
    int pair[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0);
    const int pid = b.sh("echo hello >&3; " + list_fds, {}, {"PATH=/usr/bin:/bin"}, pair[1]);
    ::close(pair[1]);
    b.await_exit(pid);
    CHECK(b[pid].out == "0\n1\n2\n3\n");
    char buffer[16] = {};
    CHECK(::read(pair[0], buffer, sizeof buffer) == 6);
    CHECK(std::string(buffer) == "hello\n");
    ::close(pair[0]);
  }
  SECTION("without") {
    const int pid = b.sh(list_fds);
    b.await_exit(pid);
    CHECK(b[pid].out == "0\n1\n2\n");
  }
  ::close(leaked);
}

TEST_CASE("process spawner: output waits while the console is congested, the exit is still seen",
          "[process_spawner]") {
  Bench b;
  bool ready = false;
  b.ready_for_output = [&](int stream) { return stream != 1 || ready; };
  SECTION("a worker that wrote a little and exited: drained at its exit") {
    const int pid = b.sh("echo parked; echo not >&2");
    CHECK(b.await_exit(pid).success());
    CHECK(b[pid].out_at_exit == "parked\n");
    CHECK(b[pid].err_at_exit == "not\n");
  }
  SECTION("a worker that writes more than a pipe holds waits in write(2) until resumed") {
    const int pid = b.sh("head -c 300000 /dev/zero; exit 4");
    run_for(b.io, 300ms);
    CHECK_FALSE(b[pid].status);
    CHECK(b[pid].out.empty());
    ready = true;
    b.spawner->resume_output();
    CHECK(b.await_exit(pid).exit_code == 4);
    CHECK(b[pid].out_at_exit.size() == 300000);
  }
}

TEST_CASE("process spawner: the destructor kills and reaps every worker still known",
          "[process_spawner]") {
  Bench b;
  const int pid = b.sh("sleep 30 & echo $!; wait");
  const pid_t child = std::stoi(b.first_line(pid));
  b.spawner.reset();
  CHECK_FALSE(process_alive(pid));
  CHECK(gone(child));
}

TEST_CASE("process spawner: what a worker started outside its group is stopped after it",
          "[process_spawner]") {
  ddp::test::TempDir dir;
  const std::string pid_file = dir.file("daemon.pid");
  Bench b(/*adopt_daemons=*/true);
  // A daemon in a session of its own (setsid -f), which killpg of the worker's group misses.
  const int pid = b.sh("setsid -f /bin/sh -c 'echo $$ > " + pid_file + ".tmp; mv " + pid_file +
                       ".tmp " + pid_file + "; exec sleep 30'");
  CHECK(b.await_exit(pid).success());
  REQUIRE(wait_until([&] { return std::filesystem::exists(pid_file); }, kGuard));
  std::ifstream in(pid_file);
  pid_t daemon = 0;
  in >> daemon;
  REQUIRE(daemon > 0);
  REQUIRE(wait_until([&] { return comm_of(daemon) == "sleep\n"; }, kGuard));
  b.spawner->release(pid);
  CHECK(process_alive(daemon));  // not in the worker's group
  // Adopted by this process once its parent (setsid) is gone: then stop_escaped finds it.
  std::vector<std::string> stopped;
  REQUIRE(wait_until(
      [&] {
        auto more = b.spawner->stop_escaped();
        stopped.insert(stopped.end(), more.begin(), more.end());
        return !stopped.empty();
      },
      kGuard));
  CHECK(stopped == std::vector<std::string>{"pid " + std::to_string(daemon) + " (sleep)"});
  CHECK_FALSE(process_alive(daemon));
}
