// In-place recovery end to end (docs/recovery.md): three ddplaunch agents on loopback, one
// native trainer rank each, --in_place_recovery. A node is SIGKILLed mid-epoch, a node joins
// mid-epoch, a rank hangs; the survivors keep their processes and the samples trained per
// epoch are exactly the epoch's permutation, each at most once. And the result of an in-place
// recovery equals that of a restart from a checkpoint at the same step.
#include <signal.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "agent_process.hpp"
#include "rendezvous/store/server/store_server.hpp"
#include "tests/support/checkpoint_weights.hpp"

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using ddp::test::AgentProcess;

namespace {

constexpr auto kGuard = 120s;  // hang guard; nothing asserts on speed
const std::string kTrain = std::string(DDP_BINARY_DIR) + "/train";
// Quick failure detection, so a lost node is re-formed around in well under a second.
const std::string kFastConf =
    "last_call_timeout=0.5,join_timeout=60,heartbeat_interval=0.2,lease_timeout=1";
// 960 training rows (1200 * 0.8): 320 per rank at 3 ranks, 480 at 2, no padding.
constexpr int kTrainRows = 960;
constexpr int kBatch = 16;

// Agents of one job, each with its own log and events file, around a standalone store
// (is_host=false): the node a test kills holds the last rank, which the rendezvous may give
// to any node, the one at the store's address included (an agent-hosted store dies with it,
// and then, as documented, the whole job ends).
struct Nodes {
  std::string dir = ddp::test::make_temp_dir();
  ddp::rendezvous::StoreServer store{{"127.0.0.1", 0}};
  int port = store.port();
  std::vector<std::unique_ptr<AgentProcess>> agents;
  std::vector<std::string> tags;

  ~Nodes() {
    agents.clear();  // SIGKILL + reap whatever still runs
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  // One node of nnodes (1 rank) running train with train_flags.
  AgentProcess& start(const std::string& tag, const std::string& addr, const std::string& nnodes,
                      const std::vector<std::string>& agent_flags,
                      const std::vector<std::string>& train_flags,
                      const std::string& rdzv_conf = kFastConf) {
    std::vector<std::string> args{"--nnodes",         nnodes,
                                  "--nproc_per_node", "1",
                                  "--rdzv_backend",   "c10d",
                                  "--rdzv_endpoint",  "127.0.0.1:" + std::to_string(port),
                                  "--rdzv_id",        "recovery",
                                  "--rdzv_conf",      rdzv_conf + ",is_host=false",
                                  "--local_addr",     addr,
                                  "--stop_timeout",   "2",
                                  "--events_file",    events_path(tag)};
    args.insert(args.end(), agent_flags.begin(), agent_flags.end());
    args.push_back(kTrain);
    args.insert(args.end(), train_flags.begin(), train_flags.end());
    tags.push_back(tag);
    agents.push_back(std::make_unique<AgentProcess>(args, std::map<std::string, std::string>{},
                                                    dir + "/" + tag + ".log"));
    return *agents.back();
  }

  // Nodes a, b and c at 127.0.0.1, .2 and .3.
  void start_abc(const std::string& nnodes, const std::vector<std::string>& agent_flags,
                 const std::vector<std::string>& train_flags,
                 const std::string& rdzv_conf = kFastConf) {
    for (const char* tag : {"a", "b", "c"}) {
      const std::string addr = std::string("127.0.0.") + std::to_string(tag[0] - 'a' + 1);
      start(tag, addr, nnodes, agent_flags, train_flags, rdzv_conf);
    }
  }

  [[nodiscard]] std::string events_path(const std::string& tag) const {
    return dir + "/" + tag + ".events";
  }
  // The events called name that agent tag recorded.
  [[nodiscard]] std::vector<nlohmann::json> events(const std::string& tag,
                                                   const std::string& name) const {
    return ddp::test::events_named(events_path(tag), name);
  }
  // Waits up to guard until some agent's log holds text (rank 0 prints progress; which node
  // hosts it is the rendezvous' choice).
  [[nodiscard]] bool wait_for_any_log(const std::string& text,
                                      std::chrono::milliseconds guard) const {
    const auto deadline = std::chrono::steady_clock::now() + guard;
    while (std::chrono::steady_clock::now() < deadline) {
      for (const auto& agent : agents) {
        if (agent->wait_for_log(text, 50ms)) return true;
      }
    }
    return false;
  }
  [[nodiscard]] std::string logs() const {
    std::string all;
    for (size_t i = 0; i < agents.size(); ++i) {
      all += "--- " + tags[i] + " ---\n" + agents[i]->log();
    }
    return all;
  }
};

std::vector<std::string> train_flags(const std::string& dir, int64_t epochs,
                                     const std::vector<std::string>& more = {}) {
  std::vector<std::string> flags{"--data",
                                 "synthetic",
                                 "--synthetic_rows",
                                 "1200",
                                 "--synthetic_features",
                                 "16",
                                 "--synthetic_classes",
                                 "4",
                                 "--hidden",
                                 "32,32",
                                 "--batch_size",
                                 std::to_string(kBatch),
                                 "--epochs",
                                 std::to_string(epochs),
                                 "--seed",
                                 "5",
                                 "--log_every",
                                 "1",
                                 "--sample_log",
                                 dir + "/samples",
                                 "--out",
                                 dir + "/final.safetensors"};
  flags.insert(flags.end(), more.begin(), more.end());
  return flags;
}

// One line of --sample_log: the indices one rank trained on in one step.
struct StepSamples {
  int64_t round = 0;
  int64_t epoch = 0;
  int64_t step = 0;
  int rank = 0;
  std::vector<int64_t> indices;
};

std::vector<StepSamples> read_sample_logs(const std::string& dir) {
  std::vector<StepSamples> all;
  if (!std::filesystem::exists(dir)) return all;  // nobody trained a step
  const std::regex line_re("round=(\\d+) epoch=(\\d+) step=(\\d+) rank=(\\d+) idx=([0-9,]*)");
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      REQUIRE(std::regex_match(line, m, line_re));
      StepSamples s{std::stoll(m[1]),
                    std::stoll(m[2]),
                    std::stoll(m[3]),
                    static_cast<int>(std::stoll(m[4])),
                    {}};
      std::stringstream list(m[5]);
      for (std::string index; std::getline(list, index, ',');)
        s.indices.push_back(std::stoll(index));
      all.push_back(std::move(s));
    }
  }
  return all;
}

// Per epoch, every training index trained on, as the runs kept them: for each (epoch, step)
// only the lines of the highest round count (a step redone after a re-form replaces the lost
// one). Fails the test if any index occurs twice in one epoch.
std::map<int64_t, std::set<int64_t>> samples_per_epoch(const std::string& dir) {
  const auto lines = read_sample_logs(dir);
  std::map<std::pair<int64_t, int64_t>, int64_t> last_round;
  for (const auto& s : lines) {
    auto& r = last_round[{s.epoch, s.step}];
    r = std::max(r, s.round);
  }
  std::map<int64_t, std::set<int64_t>> per_epoch;
  for (const auto& s : lines) {
    if (s.round != last_round[{s.epoch, s.step}]) continue;
    for (int64_t index : s.indices) {
      INFO("epoch " << s.epoch << " step " << s.step << " rank " << s.rank << " index " << index);
      CHECK(per_epoch[s.epoch].insert(index).second);  // never twice in one epoch
      CHECK(index >= 0);
      CHECK(index < kTrainRows);
    }
  }
  return per_epoch;
}

// Samples an epoch trains on at world w from global position p on (whole batches per rank).
int64_t samples_after(int64_t position, int world) {
  const int64_t per_rank = (kTrainRows - position + world - 1) / world;
  return per_rank / kBatch * kBatch * world;
}

// The agents that exited 0 and the one killed with SIGKILL, by index.
struct Outcome {
  std::vector<size_t> survivors;
  std::vector<size_t> killed;
};

Outcome wait_all(Nodes& nodes) {
  Outcome out;
  for (size_t i = 0; i < nodes.agents.size(); ++i) {
    const auto rc = nodes.agents[i]->wait(kGuard);
    if (!rc)
      FAIL("agent " << nodes.tags[i] << " still runs after " << kGuard.count() << " s\n"
                    << nodes.logs());
    if (*rc == 0) {
      out.survivors.push_back(i);
    } else {
      CHECK(*rc == 128 + SIGKILL);
      out.killed.push_back(i);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("recovery e2e: a node SIGKILLed mid-epoch, the survivors keep their processes",
          "[e2e][recovery]") {
  Nodes nodes;
  // The last rank kills its own agent (and itself) after step 5: 5 * 16 * 3 = 240 samples in.
  const auto flags = train_flags(nodes.dir, 2, {"--fault_kill_node_at_step", "5"});
  nodes.start_abc("2:3", {"--in_place_recovery"}, flags);
  const auto outcome = wait_all(nodes);
  INFO(nodes.logs());
  REQUIRE(outcome.killed.size() == 1);
  REQUIRE(outcome.survivors.size() == 2);
  for (size_t i : outcome.survivors) {
    const auto& tag = nodes.tags[i];
    // One worker process for the whole run: kept through the change, never restarted.
    CHECK(nodes.events(tag, "worker_start").size() == 1);
    const auto done = nodes.events(tag, "in_place_recovery");
    REQUIRE(done.size() == 1);
    CHECK(done[0]["reason"] == "node_lost");
    CHECK(done[0]["kept"] == 1);
    CHECK(done[0]["restarted"] == 0);
    CHECK(done[0]["step"] == 5);
    CHECK(done[0]["first_step_ms"].get<int64_t>() >= done[0]["reformed_ms"].get<int64_t>());
  }
  CHECK_THAT(nodes.logs(), Contains("in-place recovery: round 1, world 2, resumed at step 5"));
  // Epoch 0: 5 steps at 3 ranks, then the rest of the same permutation at 2; epoch 1 at 2.
  const auto per_epoch = samples_per_epoch(nodes.dir + "/samples");
  REQUIRE(per_epoch.size() == 2);
  CHECK(per_epoch.at(0).size() == static_cast<size_t>(240 + samples_after(240, 2)));
  CHECK(per_epoch.at(1).size() == static_cast<size_t>(samples_after(0, 2)));
}

TEST_CASE(
    "recovery e2e: a node paused past its lease: the others go on without it at once, then "
    "re-form with it in place",
    "[e2e][recovery]") {
  // Node c's agent and worker are SIGSTOPped mid-run. Its heartbeats stop, so after the 1 s
  // lease the others find it silent. In place they do not wait for it: their round closes as
  // soon as both are back, though the last call (60 s) would hold it open far longer than the
  // pause. Resumed, c finds itself counted out and re-joins; the group re-forms with it.
  // Expected: a world-2 round while c is stopped, then world 3 again, every agent exit 0,
  // the survivors' workers kept through both changes, no sample trained twice.
  Nodes nodes;
  const auto flags = train_flags(nodes.dir, 12, {"--fault_slow_step_ms", "50"});
  const std::string conf =
      "last_call_timeout=60,join_timeout=60,heartbeat_interval=0.2,lease_timeout=1";
  nodes.start_abc("2:3", {"--in_place_recovery"}, flags, conf);
  REQUIRE(nodes.wait_for_any_log("[train] epoch 1 step", kGuard));
  const auto started = nodes.events("c", "worker_start");
  REQUIRE(started.size() == 1);
  const pid_t worker = started[0]["pid"].get<int>();
  const pid_t agent = nodes.agents[2]->pid();
  REQUIRE(::kill(worker, SIGSTOP) == 0);
  REQUIRE(::kill(agent, SIGSTOP) == 0);
  // Bounded by 40 s, below the last call: without going on at once this cannot appear.
  const bool went_on = nodes.wait_for_any_log("in-place recovery: round 1, world 2", 40s);
  ::kill(worker, SIGCONT);  // the worker first: its agent must not find it stopped
  ::kill(agent, SIGCONT);
  INFO(nodes.logs());
  REQUIRE(went_on);
  const auto outcome = wait_all(nodes);
  REQUIRE(outcome.survivors.size() == 3);
  for (const char* tag : {"a", "b"}) {
    CHECK(nodes.events(tag, "worker_start").size() == 1);
    const auto done = nodes.events(tag, "in_place_recovery");
    REQUIRE(done.size() >= 2);
    // Told by its own watch, or by the other survivor re-joining, whichever came first.
    const std::string reason = done[0]["reason"];
    CHECK((reason == "node_lost" || reason == "node_waiting"));
    CHECK(done[0]["round"] == 1);
  }
  CHECK_THAT(nodes.logs(), Contains("in-place recovery: round 2, world 3"));
  const auto per_epoch = samples_per_epoch(nodes.dir + "/samples");
  REQUIRE(per_epoch.size() == 12);
  CHECK(per_epoch.at(11).size() == static_cast<size_t>(samples_after(0, 3)));
}

TEST_CASE("recovery e2e: a node joining mid-epoch gets the state, nobody is restarted",
          "[e2e][recovery]") {
  Nodes nodes;
  // 30 ms per step: about a second per epoch at 2 ranks, so the join lands in the middle.
  // --consistency_every 1: the parameters of every rank are compared after every step, so the
  // new rank must have received exactly the survivors' state.
  const auto flags =
      train_flags(nodes.dir, 3, {"--fault_slow_step_ms", "30", "--consistency_every", "1"});
  nodes.start("a", "127.0.0.1", "2:3", {"--in_place_recovery"}, flags);
  nodes.start("b", "127.0.0.2", "2:3", {"--in_place_recovery"}, flags);
  // Well into the first epoch at 2 ranks (30 steps per epoch), a third node arrives.
  REQUIRE(nodes.wait_for_any_log("epoch 0 step 6 ", kGuard));
  nodes.start("c", "127.0.0.3", "2:3", {"--in_place_recovery"}, flags);
  const auto outcome = wait_all(nodes);
  INFO(nodes.logs());
  REQUIRE(outcome.survivors.size() == 3);
  for (const char* tag : {"a", "b", "c"}) CHECK(nodes.events(tag, "worker_start").size() == 1);
  for (const char* tag : {"a", "b"}) {
    const auto done = nodes.events(tag, "in_place_recovery");
    REQUIRE(done.size() == 1);
    CHECK(done[0]["reason"] == "node_waiting");
    CHECK(done[0]["kept"] == 1);
    // The new rank had no state: a survivor sent it.
    CHECK(done[0]["source"].get<int>() >= 0);
    CHECK(done[0]["state_bytes"].get<int64_t>() > 0);
  }
  CHECK_THAT(nodes.logs(), Contains("in-place recovery: round 1, world 3"));
  // The world grew: the last epochs ran at 3 ranks (320 samples per rank, 20 steps).
  const auto per_epoch = samples_per_epoch(nodes.dir + "/samples");
  REQUIRE(per_epoch.size() == 3);
  CHECK(per_epoch.at(2).size() == static_cast<size_t>(samples_after(0, 3)));
}

TEST_CASE("recovery e2e: a hung rank is dumped and restarted, the other nodes re-form in place",
          "[e2e][recovery][hang]") {
  Nodes nodes;
  // Rank 1 stops making progress after step 4 (first attempt only).
  const auto flags = train_flags(nodes.dir, 2, {"--fault_hang_at_step", "4", "--fault_rank", "1"});
  const std::vector<std::string> agent{"--in_place_recovery", "--hang_timeout", "2",
                                       "--max_restarts", "1"};
  nodes.start_abc("3", agent, flags);
  const auto outcome = wait_all(nodes);
  INFO(nodes.logs());
  REQUIRE(outcome.survivors.size() == 3);
  CHECK_THAT(nodes.logs(), Contains("hang detected: rank 1"));
  int restarted_nodes = 0;
  int in_place_nodes = 0;
  for (const char* tag : {"a", "b", "c"}) {
    const auto starts = nodes.events(tag, "worker_start").size();
    const auto done = nodes.events(tag, "in_place_recovery");
    if (starts == 2) {
      ++restarted_nodes;  // the hung rank's node: its worker was dumped and started afresh
      CHECK(done.empty());
    } else {
      CHECK(starts == 1);
      ++in_place_nodes;
      REQUIRE(done.size() == 1);
      // Told by the failure record, or by the first node re-joining, whichever came first.
      const std::string reason = done[0]["reason"];
      CHECK((reason == "job_failure" || reason == "node_waiting"));
      CHECK(done[0]["step"] == 4);
    }
  }
  CHECK(restarted_nodes == 1);
  CHECK(in_place_nodes == 2);
  const auto per_epoch = samples_per_epoch(nodes.dir + "/samples");
  REQUIRE(per_epoch.size() == 2);
  CHECK(per_epoch.at(1).size() == static_cast<size_t>(samples_after(0, 3)));
}

// The native trainer's rank 1 SIGKILLs itself after step 4 on a job with a standby worker per
// node: its node's standby takes the place; nobody is stopped, every node re-forms in place and
// spends the one restart, and epoch 1 trains every sample once at world 3.
TEST_CASE("recovery e2e: a killed rank's place goes to its node's standby worker",
          "[e2e][recovery][standby]") {
  Nodes nodes;
  // 100 ms steps: the standby (started once its node's worker listens, before the group is
  // built) is there before step 4; whether it listens yet does not matter (it gets its notice
  // when it does).
  const auto flags = train_flags(
      nodes.dir, 2,
      {"--fault_kill_at_step", "4", "--fault_rank", "1", "--fault_slow_step_ms", "100"});
  const std::vector<std::string> agent{"--in_place_recovery", "--standby_workers", "1",
                                       "--max_restarts", "1"};
  nodes.start_abc("3", agent, flags);
  const auto outcome = wait_all(nodes);
  INFO(nodes.logs());
  REQUIRE(outcome.survivors.size() == 3);
  int promoted_nodes = 0;
  for (const char* tag : {"a", "b", "c"}) {
    INFO("node " << tag);
    const auto done = nodes.events(tag, "in_place_recovery");
    REQUIRE(done.size() == 1);
    CHECK(done[0]["step"] == 4);
    CHECK(nodes.events(tag, "restart").size() == 1);
    for (const auto& stopping : nodes.events(tag, "stopping")) {
      CHECK(stopping["reason"] != "failure");
    }
    const auto promoted = nodes.events(tag, "standby_promoted");
    if (promoted.empty()) {
      CHECK(nodes.events(tag, "worker_start").size() == 1);
      continue;
    }
    ++promoted_nodes;
    CHECK(promoted[0]["rank"] == 1);
    CHECK(done[0]["reason"] == "worker_failed");
    CHECK(done[0]["restarted"] == 1);
  }
  CHECK(promoted_nodes == 1);
  const auto per_epoch = samples_per_epoch(nodes.dir + "/samples");
  REQUIRE(per_epoch.size() == 2);
  CHECK(per_epoch.at(1).size() == static_cast<size_t>(samples_after(0, 3)));
}

TEST_CASE("recovery e2e: a node started without --in_place_recovery fails the job, saying so",
          "[e2e][recovery]") {
  // The two modes run different collectives (the in-place ranks start with the state
  // agreement), so a mixed job would hang or fail obscurely. Every rank refuses at init.
  Nodes nodes;
  const auto flags = train_flags(nodes.dir, 1);
  auto& a = nodes.start("a", "127.0.0.1", "2", {"--in_place_recovery"}, flags);
  auto& b = nodes.start("b", "127.0.0.2", "2", {}, flags);
  const auto rc_a = a.wait(kGuard);
  const auto rc_b = b.wait(kGuard);
  INFO(nodes.logs());
  REQUIRE(rc_a.has_value());
  REQUIRE(rc_b.has_value());
  CHECK(*rc_a != 0);
  CHECK(*rc_b != 0);
  // Both workers refuse within milliseconds of each other, but the first failure record
  // may stop the other node's worker before it prints: one log naming it is enough.
  CHECK_THAT(nodes.logs(), Contains("rank(s) run under ddplaunch --in_place_recovery and 1 "
                                    "without it") &&
                               Contains("start every node of the job with the same flags"));
  CHECK(samples_per_epoch(nodes.dir + "/samples").empty());  // nobody trained a step
}

TEST_CASE(
    "recovery e2e: an in-place recovery at step k ends with the parameters of a restart from "
    "the checkpoint of step k",
    "[e2e][recovery]") {
  // Constant learning rate: a restarted trainer plans its schedule for the new world size
  // (steps per epoch change), a kept one continues the old plan (docs/recovery.md).
  auto run = [](bool in_place) {
    Nodes nodes;
    const auto flags =
        train_flags(nodes.dir, 1,
                    {"--fault_kill_node_at_step", "6", "--checkpoint_dir", nodes.dir + "/ckpt",
                     "--checkpoint_every", "6", "--max_steps", "14", "--min_lr_ratio", "1"});
    const std::vector<std::string> agent =
        in_place ? std::vector<std::string>{"--in_place_recovery"} : std::vector<std::string>{};
    nodes.start_abc("2:3", agent, flags);
    const auto outcome = wait_all(nodes);
    INFO(nodes.logs());
    REQUIRE(outcome.survivors.size() == 2);
    for (size_t i : outcome.survivors) {
      CHECK(nodes.events(nodes.tags[i], "worker_start").size() == (in_place ? 1U : 2U));
    }
    return ddp::test::checkpoint_weights(nodes.dir + "/final.safetensors");
  };
  const auto in_place = run(true);
  const auto restarted = run(false);
  REQUIRE(in_place.size() == restarted.size());
  REQUIRE_FALSE(in_place.empty());
  // Same data split at the same step, same reduction order (the direct mesh sums in rank
  // order; two ranks only swap operands): equal to the bit in practice; the bound is for
  // a machine whose BLAS picks another kernel for the differently sized first batch.
  double worst = 0;
  for (size_t i = 0; i < in_place.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(in_place[i] - restarted[i])));
  }
  CHECK(worst <= 1e-6);
}
