// build/train in in-place recovery mode, with this test as the agent: it holds one end of a
// recovery channel per worker (tests/worker_runtime AgentChannel), a StoreServer on port 0
// as the agent's store, and sends `abort` and `round` as ddplaunch --in_place_recovery does.
// Survivors must continue in the same process and agree; a fresh worker must receive the
// state. --consistency_every 1 makes every step check that all ranks hold equal parameters.
#include <fcntl.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <tuple>

#include "rendezvous/store/server/store_server.hpp"
#include "tests/support/files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/wait_until.hpp"
#include "tests/worker_runtime/test_support.hpp"
#include "worker_runtime/checkpoint.hpp"

using namespace ddp::test;
using ddp::worker_runtime::test::AgentChannel;
using namespace std::chrono_literals;
namespace recovery = ddp::recovery;

namespace {

const std::string kTrain = build_path("train");

// A job long enough to be interrupted: 4096 rows, batch 4, stopped by --max_steps.
std::vector<std::string> train_args(const TempDir& dir, const std::vector<std::string>& extra) {
  std::vector<std::string> args{kTrain,
                                "--data",
                                "synthetic",
                                "--synthetic_rows",
                                "5120",
                                "--synthetic_features",
                                "8",
                                "--synthetic_classes",
                                "3",
                                "--hidden",
                                "16",
                                "--batch_size",
                                "4",
                                "--epochs",
                                "2",
                                "--seed",
                                "5",
                                "--log_every",
                                "50",
                                "--consistency_every",
                                "1",
                                "--backend",
                                "gloo",
                                "--sample_log",
                                dir.file("samples")};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// One worker and the agent's end of its channel.
struct Worker {
  AgentChannel channel;
  std::unique_ptr<ChildProcess> process;
};

// Starts `train` as rank of world in round (store prefix /worker/attempt_<round>), with a
// recovery channel it inherits as DDPLAUNCH_RECOVERY_FD.
Worker start_worker(int rank, int world, int round, uint16_t port,
                    const std::vector<std::string>& argv, bool in_place = true,
                    const std::map<std::string, std::string>& extra_env = {}) {
  ddp::Fd worker_end;
  Worker w{AgentChannel::make(worker_end), nullptr};
  ::fcntl(worker_end.get(), F_SETFD, 0);  // this child inherits it (started one at a time)
  ChildOptions options;
  options.argv = argv;
  options.env = {{"RANK", std::to_string(rank)},
                 {"LOCAL_RANK", std::to_string(rank)},
                 {"WORLD_SIZE", std::to_string(world)},
                 {"LOCAL_WORLD_SIZE", std::to_string(world)},
                 {"GROUP_RANK", "0"},
                 {"MASTER_ADDR", "127.0.0.1"},
                 {"MASTER_PORT", std::to_string(port)},
                 {"TORCHELASTIC_RESTART_COUNT", std::to_string(round)},
                 {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                 {recovery::kEnvFd, std::to_string(worker_end.get())}};
  if (!in_place) options.env.erase(recovery::kEnvFd);
  options.env.insert(extra_env.begin(), extra_env.end());
  options.merge_stderr = true;
  w.process = std::make_unique<ChildProcess>(options);
  return w;  // worker_end closes here: only the child holds it now
}

recovery::RoundNotice round_notice(int64_t round, int rank, int world, uint16_t port) {
  recovery::RoundNotice n;
  n.round = round;
  n.rank = rank;
  n.world_size = world;
  n.local_world_size = world;
  n.role_rank = rank;
  n.role_world_size = world;
  n.master_addr = "127.0.0.1";
  n.master_port = port;
  n.restart_count = 0;
  return n;
}

// Lines in dir/samples/*.txt (every rank's completed steps so far).
size_t sample_lines(const TempDir& dir) {
  size_t lines = 0;
  const auto samples = std::filesystem::path(dir.file("samples"));
  if (!std::filesystem::exists(samples)) return 0;
  for (const auto& f : std::filesystem::directory_iterator(samples)) {
    std::ifstream in(f.path());
    for (std::string line; std::getline(in, line);) ++lines;
  }
  return lines;
}

// dataset index -> times trained in `epoch`, from every rank's --sample_log lines; for each
// (epoch, step) only the lines of the highest round count (a step redone after a recovery).
std::map<int64_t, int> trained_in_epoch(const TempDir& dir, int64_t epoch) {
  std::map<std::pair<int64_t, int64_t>, int64_t> newest_round;            // (epoch, step) -> round
  std::vector<std::tuple<int64_t, int64_t, int64_t, std::string>> lines;  // round, epoch, step, idx
  for (const auto& f : std::filesystem::directory_iterator(dir.file("samples"))) {
    std::ifstream in(f.path());
    for (std::string line; std::getline(in, line);) {
      int64_t round = 0;
      int64_t e = 0;
      int64_t step = 0;
      int rank = 0;
      char idx[4096] = {};
      REQUIRE(std::sscanf(line.c_str(), "round=%ld epoch=%ld step=%ld rank=%d idx=%4095s", &round,
                          &e, &step, &rank, idx) == 5);
      lines.emplace_back(round, e, step, idx);
      auto& newest = newest_round[{e, step}];
      newest = std::max(newest, round);
    }
  }
  std::map<int64_t, int> seen;
  for (const auto& [round, e, step, idx] : lines) {
    if (e != epoch || round != newest_round[{e, step}]) continue;
    std::stringstream list(idx);
    for (std::string item; std::getline(list, item, ',');) ++seen[std::stoll(item)];
  }
  return seen;
}

void abort_and_announce(std::vector<Worker*> workers, int64_t old_round, int world, uint16_t port) {
  for (Worker* w : workers) {
    w->channel.send(
        recovery::Message{"abort", {{"round", std::to_string(old_round)}, {"reason", "test"}}});
  }
  for (Worker* w : workers) {
    const auto aborted = w->channel.read();
    CHECK(aborted.type == "aborted");
    CHECK(aborted.integer("round") == old_round);
  }
  for (size_t r = 0; r < workers.size(); ++r) {
    workers[r]->channel.send(
        round_notice(old_round + 1, static_cast<int>(r), world, port).to_message());
  }
}

}  // namespace

TEST_CASE("in place: a rank is lost, the two survivors continue in the same processes",
          "[in_place]") {
  // The last rank, or rank 0 (then the survivors are renumbered and old rank 1 writes the
  // metrics file).
  const int lost = GENERATE(2, 0);
  TempDir dir;
  ddp::rendezvous::StoreServer server({"127.0.0.1", 0});
  const std::string metrics = dir.file("metrics.jsonl");
  const auto argv = train_args(dir, {"--max_steps", "120", "--fault_kill_at_step", "20",
                                     "--fault_rank", std::to_string(lost), "--metrics", metrics});
  std::vector<Worker> workers;
  for (int r = 0; r < 3; ++r) workers.push_back(start_worker(r, 3, 0, server.port(), argv));
  std::vector<pid_t> pids;
  for (auto& w : workers) {
    const auto hello = w.channel.read();
    REQUIRE(hello.type == "hello");
    pids.push_back(static_cast<pid_t>(hello.integer("pid")));
  }
  // The lost rank kills itself after step 20; the survivors block in step 21's all-reduce.
  CHECK(workers[static_cast<size_t>(lost)].process->wait(60s) == 128 + SIGKILL);
  std::vector<Worker*> survivors;
  for (int r = 0; r < 3; ++r) {
    if (r != lost) survivors.push_back(&workers[static_cast<size_t>(r)]);
  }
  abort_and_announce(survivors, 0, 2, server.port());  // new ranks in the old order
  for (int r = 0; r < 2; ++r) {
    INFO("new rank " << r);
    const auto joined = survivors[static_cast<size_t>(r)]->channel.read();
    CHECK(joined.type == "joined");
    CHECK(joined.integer("round") == 1);
    CHECK(joined.integer("rank") == r);
    CHECK(joined.integer("step") == 20);        // the last step every survivor completed
    CHECK(joined.integer("source", -1) == -1);  // both held it: nothing sent
    const auto stepped = survivors[static_cast<size_t>(r)]->channel.read();
    CHECK(stepped.type == "stepped");
    CHECK(stepped.integer("step") == 21);
    // The group of each round was reported built: at start (0) and after the change (1).
    CHECK(survivors[static_cast<size_t>(r)]->channel.built == std::vector<int64_t>{0, 1});
  }
  for (int r = 0; r < 3; ++r) {
    if (r == lost) continue;
    auto& p = *workers[static_cast<size_t>(r)].process;
    INFO(p.out());
    CHECK(p.wait(120s) == 0);
    CHECK(p.pid() == pids[static_cast<size_t>(r)]);  // never restarted
  }
  const std::string out = survivors[0]->process->out();
  CHECK_THAT(out, Catch::Matchers::Contains("in-place recovery: round 1, world 2, resumed at "
                                            "step 20"));
  CHECK_THAT(out, Catch::Matchers::Contains("done: 120 steps"));
  const std::string log = read_file(metrics);
  CHECK_THAT(log, Catch::Matchers::Contains(R"("kind":"recovery")"));
  CHECK_THAT(log, Catch::Matchers::Contains(R"("step":120)"));  // the new rank 0 logs on
  // Epoch 0: 20 steps x 3 ranks x 4, then 100 steps x 2 ranks x 4, no index twice.
  const auto seen = trained_in_epoch(dir, 0);
  CHECK(seen.size() == 20 * 3 * 4 + 100 * 2 * 4);
  for (const auto& [index, count] : seen) {
    INFO("index " << index);
    CHECK(count == 1);
  }
}

TEST_CASE("in place: a failed collective the agent announces no change for fails the worker",
          "[in_place]") {
  // A peer dies and the agent says nothing (it saw no membership change: say a collective
  // timed out). The survivor must not wait for a round notice that never comes: after
  // DDPLAUNCH_RECOVERY_CHANGE_WAIT it fails as without in-place recovery, so the agent's
  // ordinary failure path restarts it. It once waited 10 minutes.
  TempDir dir;
  ddp::rendezvous::StoreServer server({"127.0.0.1", 0});
  const auto argv =
      train_args(dir, {"--max_steps", "120", "--fault_kill_at_step", "5", "--fault_rank", "1"});
  const std::map<std::string, std::string> env{{recovery::kEnvChangeWait, "2"}};
  std::vector<Worker> workers;
  for (int r = 0; r < 2; ++r) {
    workers.push_back(start_worker(r, 2, 0, server.port(), argv, true, env));
  }
  for (auto& w : workers) REQUIRE(w.channel.read().type == "hello");
  CHECK(workers[1].process->wait(60s) == 128 + SIGKILL);
  auto& survivor = *workers[0].process;
  const int code = survivor.wait(60s);  // hang guard, far above the 2 s asked for
  INFO(survivor.out());
  CHECK(code != ddp::test::kTimedOut);
  CHECK(code != 0);
  CHECK_THAT(survivor.out(),
             Catch::Matchers::Contains("the agent announced no membership change within 2 s"));
  CHECK_THAT(survivor.out(), !Catch::Matchers::Contains("in-place recovery after"));
}

TEST_CASE("in place: a bad DDPLAUNCH_RECOVERY_CHANGE_WAIT is refused, naming it", "[in_place]") {
  TempDir dir;
  ddp::rendezvous::StoreServer server({"127.0.0.1", 0});
  auto w = start_worker(0, 1, 0, server.port(), train_args(dir, {"--max_steps", "3"}), true,
                        {{recovery::kEnvChangeWait, "soon"}});
  auto& p = *w.process;
  CHECK(p.wait(60s) != 0);
  CHECK_THAT(p.out(), Catch::Matchers::Contains("DDPLAUNCH_RECOVERY_CHANGE_WAIT='soon'") &&
                          Catch::Matchers::Contains("expected whole seconds"));
}

TEST_CASE("in place: a node joins, the fresh worker receives the state", "[in_place]") {
  TempDir dir;
  ddp::rendezvous::StoreServer server({"127.0.0.1", 0});
  const auto argv = train_args(dir, {"--max_steps", "2000"});
  std::vector<Worker> workers;
  for (int r = 0; r < 2; ++r) workers.push_back(start_worker(r, 2, 0, server.port(), argv));
  for (auto& w : workers) REQUIRE(w.channel.read().type == "hello");
  // Training is under way once some steps are logged (far from --max_steps).
  REQUIRE(wait_until([&] { return sample_lines(dir) >= 20; }, 60s));
  abort_and_announce({&workers[0], &workers[1]}, 0, 3, server.port());
  workers.push_back(start_worker(2, 3, 1, server.port(), argv));  // the new node's worker
  REQUIRE(workers[2].channel.read().type == "hello");
  int64_t step = -1;
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r);
    const auto joined = workers[static_cast<size_t>(r)].channel.read();
    CHECK(joined.type == "joined");
    CHECK(joined.integer("round") == 1);
    CHECK(joined.integer("source", -1) >= 0);  // the fresh rank needed the state
    CHECK(joined.integer("state_bytes") > 0);
    if (step < 0) step = joined.integer("step");
    CHECK(joined.integer("step") == step);
    CHECK(workers[static_cast<size_t>(r)].channel.read().type == "stepped");
  }
  CHECK(step > 0);
  for (auto& w : workers) {
    INFO(w.process->out());
    CHECK(w.process->wait(120s) == 0);  // with a consistency check after every step
  }
  // Epoch 0 (world 2, then 3 from mid-epoch): every one of the 4096 training rows once,
  // except the last partial batch per rank (dropped) and at most 2 padding repeats.
  const auto seen = trained_in_epoch(dir, 0);
  int repeats = 0;
  for (const auto& [index, count] : seen) repeats += count - 1;
  CHECK(repeats <= 2);
  CHECK(seen.size() + 3 * 4 >= 4096);
}

// Steps 1-20 at world 3, then 21-120 at world 2: once with an in-place recovery after step
// 20, once the classic way (a checkpoint at step 20, a new job of 2 resuming from it). Same
// data order, optimizer state and LR schedule, and the direct mesh reduces in rank order, so
// the parameters are expected bit for bit equal.
TEST_CASE("in place: the same parameters as a restart from a checkpoint at that step",
          "[in_place]") {
  TempDir dir;
  ddp::rendezvous::StoreServer server({"127.0.0.1", 0});
  const std::string in_place_out = dir.file("in_place.safetensors");
  const std::string restart_out = dir.file("restart.safetensors");
  {
    const auto argv = train_args(dir, {"--max_steps", "120", "--fault_kill_at_step", "20",
                                       "--fault_rank", "2", "--out", in_place_out});
    std::vector<Worker> workers;
    for (int r = 0; r < 3; ++r) workers.push_back(start_worker(r, 3, 0, server.port(), argv));
    for (auto& w : workers) REQUIRE(w.channel.read().type == "hello");
    CHECK(workers[2].process->wait(60s) == 128 + SIGKILL);
    abort_and_announce({&workers[0], &workers[1]}, 0, 2, server.port());
    for (int r = 0; r < 2; ++r) {
      INFO(workers[static_cast<size_t>(r)].process->out());
      CHECK(workers[static_cast<size_t>(r)].process->wait(120s) == 0);
    }
  }
  // The reference: rounds 10 and 9 of the same store (fresh prefixes), no recovery channel.
  const std::string checkpoints = dir.file("checkpoints");
  const std::vector<std::string> common = {"--checkpoint_dir", checkpoints};
  for (const auto& [world, extra] : std::vector<std::pair<int, std::vector<std::string>>>{
           {3, {"--max_steps", "20", "--checkpoint_every", "20"}},
           {2, {"--max_steps", "120", "--out", restart_out}}}) {
    auto args = extra;
    args.insert(args.end(), common.begin(), common.end());
    const auto argv = train_args(dir, args);
    std::vector<Worker> workers;
    for (int r = 0; r < world; ++r) {
      workers.push_back(start_worker(r, world, 7 + world, server.port(), argv, false));
    }
    for (auto& w : workers) {
      INFO(w.process->out());
      CHECK(w.process->wait(120s) == 0);
    }
  }
  const auto a = ddp::worker_runtime::load_checkpoint(in_place_out);
  const auto b = ddp::worker_runtime::load_checkpoint(restart_out);
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (const auto& [name, tensor] : a.tensors) {
    INFO(name);
    REQUIRE(b.tensors.contains(name));
    CHECK(tensor.data == b.tensors.at(name).data);
  }
}

TEST_CASE("the node-loss hook (fault_kill_node_at_step) kills the parent, then the worker",
          "[in_place]") {
  TempDir dir;
  std::string command;
  for (const auto& a : train_args(dir, {"--fault_kill_node_at_step", "3", "--max_steps", "50"})) {
    command += "'" + a + "' ";
  }
  // A shell stands in for the agent; `; echo` keeps it from exec'ing train in its place.
  const ProcessResult r = run_process({"/bin/sh", "-c", command + "; echo agent survived"}, 60s);
  INFO(r.output);
  CHECK(r.exit_code == 128 + SIGKILL);
  CHECK_THAT(r.output, Catch::Matchers::Contains("--fault_kill_node_at_step 3 reached"));
  CHECK_THAT(r.output, !Catch::Matchers::Contains("agent survived"));
}
