// Silence or death (docs/multinode.md, "Silence or death"): two hosts made of network
// namespaces (tests/support/netns.hpp), a job on both, and the link between them cut for a
// while. A blip shorter than --peer_tolerance costs a stall and nothing else (exit 0, no
// restart, no re-form, the same worker pids); silence longer than it loses the node; a death
// (a killed agent) is still found at once; a crash or a SIGTERM after a blip still reaches
// every node (the scenario matrix's blip column, docs/multinode.md). Needs root and `ip`; skips
// with a message without.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cluster_job.hpp"
#include "tests/support/netns.hpp"
#include "tests/support/python.hpp"
#include "tests/support/temp_dir.hpp"

using namespace std::chrono_literals;
using ddp::test::ClusterJob;
using ddp::test::NetnsCluster;

namespace {

constexpr std::uint16_t kStorePort = 29500;
const std::string kJobWorker = std::string(DDP_SOURCE_DIR) + "/tests/e2e/scripts/job_worker.sh";
const std::string kTorchLoop =
    std::string(DDP_SOURCE_DIR) + "/tests/e2e/scripts/torch_allreduce_loop.py";
// Short enough to keep the suite fast, long enough that a 5 s blip (plus TCP's retransmission
// back-off, up to ~1.6 s more at this RTT) stays under it.
constexpr const char* kTolerance = "9";
constexpr auto kGuard = 60s;

std::unique_ptr<NetnsCluster> cluster_or_skip() {
  std::string why_not;
  auto cluster = NetnsCluster::make(2, why_not);
  if (!cluster) WARN("SKIPPED: cannot make hosts from network namespaces here: " << why_not);
  return cluster;
}

struct Job {
  bool elastic = false;
  std::string nnodes = "1:2";  // elastic only
  std::string tolerance = kTolerance;
  std::string rdzv_conf = "join_timeout=20,last_call_timeout=1,exit_barrier_timeout=20";
  int max_restarts = 3;
  std::vector<std::string> worker{kJobWorker};
};

std::vector<std::string> args_for(const NetnsCluster& cluster, std::size_t i, const Job& job) {
  const std::string port = std::to_string(kStorePort);
  std::vector<std::string> args;
  if (job.elastic) {
    args = {"--nnodes",        job.nnodes,
            "--rdzv_backend",  "c10d",
            "--rdzv_endpoint", cluster.host(0).addr() + ":" + port,
            "--rdzv_id",       "blip"};
  } else {
    args = {"--nnodes",      "2",
            "--node_rank",   std::to_string(i),
            "--master_addr", cluster.host(0).addr(),
            "--master_port", port};
  }
  args.insert(args.end(), {"--local_addr", cluster.host(i).addr(), "--peer_tolerance",
                           job.tolerance, "--max_restarts", std::to_string(job.max_restarts),
                           "--stop_timeout", "2", "--rdzv_conf", job.rdzv_conf});
  args.insert(args.end(), job.worker.begin(), job.worker.end());
  return args;
}

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Every worker line of the log ("WORKER RANK=...") with its pid, which must not change.
void start_both(ClusterJob& job, const NetnsCluster& cluster, const Job& spec,
                const std::map<std::string, std::string>& env) {
  job.start(0, args_for(cluster, 0, spec), env);
  job.start(1, args_for(cluster, 1, spec), env);
}

// Cuts host 1's link for each of blips (seconds apart), bringing it back in between.
void blips(NetnsCluster& cluster, const std::vector<std::chrono::milliseconds>& lengths) {
  for (const auto length : lengths) {
    cluster.cut_link(1, NetnsCluster::LinkEnd::kSwitch);
    std::this_thread::sleep_for(length);
    cluster.restore_link(1);
    std::this_thread::sleep_for(2500ms);  // TCP's back-off retransmits, then a calm spell
  }
}

// No restart spent and no re-form: every worker ran once, in attempt 0, to its end.
void check_untouched(const ClusterJob& job, const std::vector<std::optional<int>>& codes,
                     const std::string& started, const std::string& done) {
  for (std::size_t a = 0; a < 2; ++a) {
    INFO("agent " << a);
    CHECK(codes[a] == 0);
    const std::string log = job.log(a);
    CHECK(count(log, started) == 1);
    CHECK(count(log, done) == 1);
    CHECK_THAT(log, !Catch::Contains("RESTARTS=1") && !Catch::Contains("restart=1"));
    CHECK_THAT(log, !Catch::Contains("lost the rendezvous store") &&
                        !Catch::Contains("stopped heartbeating") &&
                        !Catch::Contains("re-forming") && !Catch::Contains("restarting"));
  }
}

}  // namespace

TEST_CASE("netns blip: 1, 2 and 5 s of silence cost a stall, no restart, no re-form",
          "[e2e][netns][blip]") {
  const auto cluster = cluster_or_skip();
  if (!cluster) return;
  const bool elastic = GENERATE(false, true);
  INFO((elastic ? "elastic 1:2" : "static 2 nodes"));
  Job spec;
  spec.elastic = elastic;
  // The workers outlive the three blips, then finish; a restart would run them again.
  const std::map<std::string, std::string> env{{"NAP", "20"}};
  ClusterJob job(*cluster);
  start_both(job, *cluster, spec, env);
  for (std::size_t a = 0; a < 2; ++a) REQUIRE(job.agent(a).wait_for_log("WORLD_SIZE=2", kGuard));
  blips(*cluster, {1000ms, 2000ms, 5000ms});
  const auto codes = job.wait_all(kGuard);
  INFO(job.logs());
  check_untouched(job, codes, "WORKER RANK=", "DONE RANK=");
  if (elastic) {
    // One line on the store host: the other node was silent and came back. Elastic group
    // ranks follow arrival, so the host may be group rank 1 and the other node 0.
    const std::string host_log = job.log(0);
    const bool host_is_one = host_log.find("group rank 1, ranks") != std::string::npos;
    const std::string other = host_is_one ? "0" : "1";
    CHECK_THAT(host_log, Catch::Matches("(.|\\n)*node with group rank " + other +
                                        " was silent for [0-9.]+ s and came back(.|\\n)*"));
  } else {
    // Static: no heartbeats, but the cut-off node's failure watch saw its store stall.
    CHECK_THAT(job.log(1), Catch::Matches("(.|\\n)*the store at " + cluster->host(0).addr() +
                                          ":29500 was silent for at least [0-9.]+ s and "
                                          "came "
                                          "back(.|\\n)*"));
  }
}

TEST_CASE("netns blip: a PyTorch gloo all_reduce loop rides out 1, 2 and 5 s blips",
          "[e2e][netns][blip][pytorch]") {
  const auto cluster = cluster_or_skip();
  if (!cluster) return;
  const auto& torch = ddp::test::torches().back();
  if (!torch.installed()) {
    WARN("SKIPPED: " << torch.missing_message());
    return;
  }
  const bool elastic = GENERATE(false, true);
  INFO((elastic ? "elastic 1:2" : "static 2 nodes") << ", PyTorch " << torch.version);
  Job spec;
  spec.elastic = elastic;
  spec.worker = {torch.python, kTorchLoop};
  // Gloo finds its address from the host name, which every namespace shares: name the device.
  // The loop outlives the three blips and their calm spells (about 16 s), then finishes.
  const std::map<std::string, std::string> env{{"LOOP_SECONDS", "22"},
                                               {"GLOO_SOCKET_IFNAME", "eth0"}};
  ClusterJob job(*cluster);
  start_both(job, *cluster, spec, env);
  for (std::size_t a = 0; a < 2; ++a) {
    INFO(job.logs());
    REQUIRE(job.agent(a).wait_for_log("TORCH LOOP", kGuard));
  }
  blips(*cluster, {1000ms, 2000ms, 5000ms});
  const auto codes = job.wait_all(kGuard);
  INFO(job.logs());
  check_untouched(job, codes, "TORCH LOOP", "TORCH DONE");
}

TEST_CASE("netns blip: a native train run (Gloo) rides out 1, 2 and 5 s blips",
          "[e2e][netns][blip]") {
  const auto cluster = cluster_or_skip();
  if (!cluster) return;
  const bool elastic = GENERATE(false, true);
  INFO((elastic ? "elastic 1:2" : "static 2 nodes"));
  ddp::test::TempDir dir;
  Job spec;
  spec.elastic = elastic;
  // 30 steps per epoch per rank, 200 ms each: about 24 s of training across the blips (about
  // 16 s with their calm spells).
  spec.worker = {std::string(DDP_BINARY_DIR) + "/train",
                 "--data",
                 "synthetic",
                 "--synthetic_rows",
                 "1200",
                 "--synthetic_features",
                 "16",
                 "--synthetic_classes",
                 "4",
                 "--hidden",
                 "32",
                 "--batch_size",
                 "16",
                 "--epochs",
                 "4",
                 "--fault_slow_step_ms",
                 "200",
                 "--out",
                 dir.path().string() + "/final.safetensors"};
  ClusterJob job(*cluster);
  start_both(job, *cluster, spec, {});
  // Rank 0 prints the start: on node 0 when static, on whichever node came first when elastic.
  const auto started = [&] {
    return count(job.log(0), "[train] 2 rank(s)") + count(job.log(1), "[train] 2 rank(s)");
  };
  const auto guard = std::chrono::steady_clock::now() + kGuard;
  while (started() == 0 && std::chrono::steady_clock::now() < guard) {
    std::this_thread::sleep_for(100ms);
  }
  REQUIRE(started() == 1);
  blips(*cluster, {1000ms, 2000ms, 5000ms});
  const auto codes = job.wait_all(kGuard);
  INFO(job.logs());
  for (std::size_t a = 0; a < 2; ++a) {
    CHECK(codes[a] == 0);
    CHECK_THAT(job.log(a), !Catch::Contains("restart") && !Catch::Contains("re-form") &&
                               !Catch::Contains("lost the rendezvous store"));
  }
  // One start, never restarted, and one end.
  CHECK(started() == 1);
  CHECK(count(job.log(0), "[train] done:") + count(job.log(1), "[train] done:") == 1);
}

TEST_CASE("netns blip: silence longer than the tolerance loses the node, on both sides",
          "[e2e][netns][blip]") {
  const auto cluster = cluster_or_skip();
  if (!cluster) return;
  const bool elastic = GENERATE(false, true);
  INFO((elastic ? "elastic 1:2" : "static 2 nodes"));
  Job spec;
  spec.elastic = elastic;
  spec.tolerance = "4";
  spec.max_restarts = 0;
  const std::map<std::string, std::string> env{{"NAP", "60"}};
  ClusterJob job(*cluster);
  start_both(job, *cluster, spec, env);
  for (std::size_t a = 0; a < 2; ++a) REQUIRE(job.agent(a).wait_for_log("WORLD_SIZE=2", kGuard));
  const auto cut = std::chrono::steady_clock::now();
  cluster->cut_link(1, NetnsCluster::LinkEnd::kSwitch);
  const std::string said =
      "lost the rendezvous store, silent for longer than the peer tolerance (4 s)";
  if (elastic) {
    // The host goes on alone (MIN 1): a re-form without node 1, no restart spent.
    REQUIRE(job.agent(0).wait_for_log("GROUP_WORLD_SIZE=1 RESTARTS=1", 20s));
    // The cut-off node stops its workers and comes back as a joining node once it can.
    REQUIRE(job.agent(1).wait_for_log("joining the job again as a new node", 20s));
    CHECK(std::chrono::steady_clock::now() - cut >= 4s);
    CHECK_THAT(job.log(1), Catch::Contains(said));
    cluster->restore_link(1);
    const bool rejoined = job.agent(1).wait_for_log("GROUP_WORLD_SIZE=2 RESTARTS=2", 30s);
    INFO(job.logs());
    REQUIRE(rejoined);
    REQUIRE(job.agent(0).wait_for_log("GROUP_WORLD_SIZE=2 RESTARTS=2", 10s));
    for (std::size_t a = 0; a < 2; ++a) job.agent(a).kill(SIGTERM);
    const auto codes = job.wait_all(20s);
    CHECK(codes[0].has_value());
    CHECK(codes[1].has_value());
    return;
  }
  // The cut-off node finds the store silent for longer than the tolerance and leaves, saying
  // so, within the tolerance plus a few seconds; never a join timeout.
  const auto cut_off = job.wait(1, 20s);
  INFO(job.logs());
  REQUIRE(cut_off.has_value());
  CHECK(*cut_off == 1);
  CHECK_THAT(job.log(1), Catch::Contains(said));
  // It says the job has failed, not that the store host died.
  CHECK_THAT(job.log(1), Catch::Contains("the job cannot go on: this node or the store host was "
                                         "cut off") &&
                             Catch::Contains("the job has failed on the other nodes too") &&
                             !Catch::Contains("so that node is gone"));
  CHECK(std::chrono::steady_clock::now() - cut >= 4s);
  {
    // A static job cannot replace a node: the host fails too, at once, not after 600 s.
    const auto host = job.wait(0, 20s);
    REQUIRE(host.has_value());
    CHECK(*host == 1);
    CHECK_THAT(job.log(0), Catch::Contains("the job cannot go on: node 1 is gone"));
  }
  cluster->restore_link(1);
}

TEST_CASE("netns blip: a silence just shorter than the tolerance costs a stall, no more",
          "[e2e][netns][blip]") {
  // 3.6 s of a 4 s tolerance: every connection of both agents (idle ones last heard up to a
  // keepalive interval before the cut, busy ones resending into it) and the elastic lease must
  // ride it out. Before the options counted the time before the cut, this lost the node.
  const auto cluster = cluster_or_skip();
  if (!cluster) return;
  const bool elastic = GENERATE(false, true);
  INFO((elastic ? "elastic 2:2" : "static 2 nodes"));
  Job spec;
  spec.elastic = elastic;
  spec.nnodes = "2:2";
  spec.tolerance = "4";
  const std::map<std::string, std::string> env{{"NAP", "14"}};
  ClusterJob job(*cluster);
  start_both(job, *cluster, spec, env);
  for (std::size_t a = 0; a < 2; ++a) REQUIRE(job.agent(a).wait_for_log("WORLD_SIZE=2", kGuard));
  std::this_thread::sleep_for(1500ms);  // a calm spell: every connection idle, probed
  blips(*cluster, {3600ms});
  const auto codes = job.wait_all(kGuard);
  INFO(job.logs());
  check_untouched(job, codes, "WORKER RANK=", "DONE RANK=");
  for (std::size_t a = 0; a < 2; ++a) {
    CHECK_THAT(job.log(a),
               !Catch::Contains("is gone") && !Catch::Contains("joining the job again"));
  }
}

TEST_CASE("netns blip: a fixed-size job gets a node cut off for long back once its link is",
          "[e2e][netns][blip]") {
  // --nnodes 2:2: the host cannot go on alone, so it waits for the node it lost; the cut-off
  // node keeps trying to reach the store (its link stays down for 10 s after it noticed) and
  // joins again as soon as it can. Both then finish with exit 0, counting no restart.
  const auto cluster = cluster_or_skip();
  if (!cluster) return;
  Job spec;
  spec.elastic = true;
  spec.nnodes = "2:2";
  spec.tolerance = "4";
  spec.rdzv_conf = "join_timeout=60,last_call_timeout=1,exit_barrier_timeout=20";
  const std::map<std::string, std::string> env{{"NAP", "8"}};
  ClusterJob job(*cluster);
  start_both(job, *cluster, spec, env);
  for (std::size_t a = 0; a < 2; ++a) REQUIRE(job.agent(a).wait_for_log("WORLD_SIZE=2", kGuard));
  cluster->cut_link(1, NetnsCluster::LinkEnd::kSwitch);
  REQUIRE(job.agent(1).wait_for_log("joining the job again as a new node", 30s));
  REQUIRE(job.agent(0).wait_for_log("membership changed (node_lost)", 30s));
  std::this_thread::sleep_for(10s);  // connects time out; the node keeps trying
  CHECK_FALSE(job.exited_at(1).has_value());
  cluster->restore_link(1);
  const auto codes = job.wait_all(kGuard);
  INFO(job.logs());
  for (std::size_t a = 0; a < 2; ++a) {
    INFO("agent " << a);
    CHECK(codes[a] == 0);
    const std::string log = job.log(a);
    CHECK(count(log, "DONE RANK=") == 1);  // the re-formed round's worker finished
    // Nobody spends a restart on a node that came back: every node counts the same.
    CHECK_THAT(log, !Catch::Contains("counting it as restart") && !Catch::Contains("attempt 1 of"));
    CHECK_THAT(log, !Catch::Contains("a static job cannot replace a node"));
  }
  // The cut-off node took its store for silent, not dead: it voted for its successor (itself),
  // could not make a majority of the two alone, and went back to the store once it answered.
  CHECK_THAT(job.log(1), Catch::Contains("moving to a successor's store") &&
                             Catch::Contains("still looking for the store's successor") &&
                             Catch::Contains("the store is now " + cluster->host(0).addr()));
}

TEST_CASE("netns blip: a node SIGKILLed is still found at once", "[e2e][netns][blip]") {
  const auto cluster = cluster_or_skip();
  if (!cluster) return;
  const std::size_t victim = GENERATE(0u, 1u);
  INFO((victim == 0 ? "the store host killed" : "the other agent killed"));
  Job spec;
  spec.tolerance = "30";  // silence would take 30 s: only the closed connection is fast
  spec.max_restarts = 0;
  const std::map<std::string, std::string> env{{"NAP", "60"}};
  ClusterJob job(*cluster);
  start_both(job, *cluster, spec, env);
  for (std::size_t a = 0; a < 2; ++a) REQUIRE(job.agent(a).wait_for_log("WORLD_SIZE=2", kGuard));
  const auto killed = std::chrono::steady_clock::now();
  job.agent(victim).kill(SIGKILL);
  const auto code = job.wait(1 - victim, 10s);
  INFO(job.logs());
  REQUIRE(code.has_value());
  CHECK(*code == 1);
  CHECK(std::chrono::steady_clock::now() - killed < 5s);  // stop_timeout 2 s included
  if (victim == 0) {
    // A death, and said to be one: not silence.
    CHECK_THAT(job.log(1), Catch::Contains("lost the rendezvous store, its host closed, reset or "
                                           "refused the connection"));
  }
}

TEST_CASE("netns blip: the store host paused 10 s accuses nobody when it resumes",
          "[e2e][netns][blip]") {
  const auto cluster = cluster_or_skip();
  if (!cluster) return;
  Job spec;
  spec.elastic = true;
  spec.tolerance = "15";
  // A lease far shorter than the pause: only the pause check keeps the resumed host from
  // taking the other node's silence (which it could not observe) for a loss.
  spec.rdzv_conf = "join_timeout=20,last_call_timeout=1,lease_timeout=3,heartbeat_interval=0.5";
  const std::map<std::string, std::string> env{{"NAP", "16"}};
  ClusterJob job(*cluster);
  start_both(job, *cluster, spec, env);
  for (std::size_t a = 0; a < 2; ++a) REQUIRE(job.agent(a).wait_for_log("WORLD_SIZE=2", kGuard));
  job.agent(0).kill(SIGSTOP);
  std::this_thread::sleep_for(10s);
  job.agent(0).kill(SIGCONT);
  const auto codes = job.wait_all(kGuard);
  INFO(job.logs());
  check_untouched(job, codes, "WORKER RANK=", "DONE RANK=");
  CHECK_THAT(job.log(0), Catch::Contains("this node or the store was unresponsive for"));
}
