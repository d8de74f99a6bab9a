// Losing the node that hosts the rendezvous store costs what losing any other node costs
// (docs/multinode.md, "When the store's host is lost"): agents on loopback, the store hosted by
// the agent at the endpoint's address (no standalone store), that agent SIGKILLed. The
// survivors carry the store on to a successor's standby and re-form, in place where asked,
// and finish with exit 0. Every case writes down each node's outcome.
#include <signal.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>

#include "agent_process.hpp"
#include "tests/support/etcd_cluster.hpp"

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using ddp::test::AgentProcess;

namespace {

constexpr auto kGuard = 120s;  // hang guard; nothing asserts on speed
const std::string kWorker = std::string(DDP_SOURCE_DIR) + "/tests/e2e/scripts/job_worker.sh";
const std::string kFastConf =
    "last_call_timeout=0.5,join_timeout=60,heartbeat_interval=0.2,lease_timeout=1";
const std::string kEtcdConf = "last_call_timeout=0.5,join_timeout=60,lease_timeout=30";

// The agents of one job; on c10d the first one started is at the endpoint's address and hosts
// the store. With etcd set, the rendezvous is there and group rank 0 serves the workers' store.
struct Job {
  std::string dir = ddp::test::make_temp_dir();
  int port = ddp::test::free_port();
  std::vector<std::unique_ptr<AgentProcess>> agents;
  std::string etcd;  // an etcd endpoint: the etcd-v3 backend

  ~Job() {
    agents.clear();  // SIGKILL + reap whatever still runs
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  AgentProcess& start(const std::string& nnodes, const std::vector<std::string>& agent_flags,
                      const std::vector<std::string>& worker,
                      const std::map<std::string, std::string>& env = {}) {
    const size_t i = agents.size();
    // On etcd a 30 s lease: only the death witness explains a quick re-form.
    const bool on_etcd = !etcd.empty();
    std::vector<std::string> args{
        "--nnodes",         nnodes,
        "--nproc_per_node", "1",
        "--rdzv_backend",   on_etcd ? "etcd-v3" : "c10d",
        "--rdzv_endpoint",  on_etcd ? etcd : "127.0.0.1:" + std::to_string(port),
        "--rdzv_id",        "store-loss",
        "--rdzv_conf",      on_etcd ? kEtcdConf : kFastConf,
        "--local_addr",     "127.0.0." + std::to_string(i + 1),
        "--stop_timeout",   "2",
        "--events_file",    events_path(i)};
    args.insert(args.end(), agent_flags.begin(), agent_flags.end());
    args.insert(args.end(), worker.begin(), worker.end());
    agents.push_back(
        std::make_unique<AgentProcess>(args, env, dir + "/" + std::to_string(i) + ".log"));
    return *agents.back();
  }
  [[nodiscard]] std::string events_path(size_t i) const {
    return dir + "/" + std::to_string(i) + ".events";
  }
  [[nodiscard]] std::vector<nlohmann::json> events(size_t i, const std::string& name) const {
    return ddp::test::events_named(events_path(i), name);
  }
  [[nodiscard]] bool wait_for_all(const std::string& text, const std::vector<size_t>& which) const {
    for (size_t i : which) {
      if (!agents[i]->wait_for_log(text, kGuard)) return false;
    }
    return true;
  }
  [[nodiscard]] bool wait_for_any(const std::string& text) const {
    const auto deadline = std::chrono::steady_clock::now() + kGuard;
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
      all += "--- agent " + std::to_string(i) + " ---\n" + agents[i]->log();
    }
    return all;
  }
  // Waits for agents which; their exit codes.
  std::vector<int> codes(const std::vector<size_t>& which) {
    std::vector<int> out;
    for (size_t i : which) {
      const auto rc = agents[i]->wait(kGuard);
      if (!rc) FAIL("agent " << i << " still runs after " << kGuard.count() << " s\n" << logs());
      out.push_back(*rc);
    }
    return out;
  }
};

std::vector<std::string> train(const std::string& dir, int epochs, int slow_ms) {
  return ddp::test::synthetic_train(
      epochs, slow_ms, {"--sample_log", dir + "/samples", "--out", dir + "/final.safetensors"});
}

// Per (epoch, step) the indices of the highest round (a step redone after a re-form replaces
// the lost one), per epoch: fails when an index occurs twice in one epoch.
std::map<int64_t, std::set<int64_t>> samples_per_epoch(const std::string& dir) {
  struct Line {
    int64_t round, epoch, step;
    std::string indices;
  };
  std::vector<Line> lines;
  const std::regex re("round=(\\d+) epoch=(\\d+) step=(\\d+) rank=(\\d+) idx=([0-9,]*)");
  if (std::filesystem::exists(dir)) {
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      std::ifstream in(entry.path());
      for (std::string text; std::getline(in, text);) {
        std::smatch m;
        if (std::regex_match(text, m, re)) {
          lines.push_back({std::stoll(m[1]), std::stoll(m[2]), std::stoll(m[3]), m[5]});
        }
      }
    }
  }
  std::map<std::pair<int64_t, int64_t>, int64_t> last_round;
  for (const auto& l : lines) {
    auto& r = last_round[{l.epoch, l.step}];
    r = std::max(r, l.round);
  }
  std::map<int64_t, std::set<int64_t>> per_epoch;
  for (const auto& l : lines) {
    if (l.round != last_round[{l.epoch, l.step}]) continue;
    std::stringstream list(l.indices);
    for (std::string index; std::getline(list, index, ',');) {
      INFO("epoch " << l.epoch << " step " << l.step << " index " << index);
      CHECK(per_epoch[l.epoch].insert(std::stoll(index)).second);
    }
  }
  return per_epoch;
}

}  // namespace

TEST_CASE("store loss e2e: the store host SIGKILLed, the survivors finish in place",
          "[e2e][store_loss]") {
  // Three nodes of the native trainer, --in_place_recovery; the node hosting the store is
  // SIGKILLed in the first epoch. Expected: agent 0 137; agents 1 and 2 exit 0 with one worker
  // process each for the whole run (re-formed in place, reason node_lost), the store moved to a
  // successor's standby, and no sample of an epoch trained twice.
  Job job;
  const auto flags = train(job.dir, 2, 30);
  for (int i = 0; i < 3; ++i) job.start("2:3", {"--in_place_recovery"}, flags);
  REQUIRE(job.wait_for_any("epoch 0 step 4 "));
  job.agents[0]->kill(SIGKILL);
  const auto codes = job.codes({0, 1, 2});
  INFO(job.logs());
  CHECK(codes[0] == 128 + SIGKILL);
  for (size_t i : {1u, 2u}) {
    INFO("agent " << i);
    CHECK(codes[i] == 0);
    CHECK(job.events(i, "worker_start").size() == 1);  // the same process throughout
    const auto recovered = job.events(i, "in_place_recovery");
    REQUIRE(recovered.size() == 1);
    CHECK(recovered[0]["reason"] == "node_lost");
    CHECK(recovered[0]["kept"] == 1);
    CHECK_THAT(job.agents[i]->log(), Contains("the node that hosted it is gone; the store moves") &&
                                         Contains("the store is now 127.0.0."));
  }
  const auto per_epoch = samples_per_epoch(job.dir + "/samples");
  CHECK(per_epoch.size() == 2);
}

TEST_CASE("store loss e2e: etcd-v3, the workers' store host SIGKILLed, survivors finish in place",
          "[e2e][store_loss][etcd]") {
  // The same three trainers on etcd-v3 with a 30 s lease: group rank 0, which serves the
  // workers' store, is SIGKILLed in the first epoch. The survivors see its connection close
  // (the death witness), revoke its lease and re-form in place at once; the next group rank 0
  // serves the workers' store. Expected: the killed agent 137, the other two exit 0 with one
  // worker process each (reason node_lost), and no sample of an epoch trained twice.
  ddp::test::EtcdCluster cluster;
  Job job;
  job.etcd = cluster.endpoint(0);
  const auto flags = train(job.dir, 2, 30);
  for (int i = 0; i < 3; ++i) job.start("2:3", {"--in_place_recovery"}, flags);
  REQUIRE(job.wait_for_any("epoch 0 step 4 "));
  size_t host = 3;
  for (size_t i = 0; i < 3; ++i) {
    if (job.agents[i]->log().find("serving the workers' store") != std::string::npos) host = i;
  }
  REQUIRE(host < 3);
  job.agents[host]->kill(SIGKILL);
  const auto codes = job.codes({0, 1, 2});
  INFO(job.logs());
  for (size_t i = 0; i < 3; ++i) {
    INFO("agent " << i);
    if (i == host) {
      CHECK(codes[i] == 128 + SIGKILL);
      continue;
    }
    CHECK(codes[i] == 0);
    CHECK(job.events(i, "worker_start").size() == 1);
    const auto recovered = job.events(i, "in_place_recovery");
    REQUIRE(recovered.size() == 1);
    CHECK(recovered[0]["reason"] == "node_lost");
  }
  CHECK_THAT(job.logs(), Contains("closed its connection to the workers' store: it is gone"));
  const auto per_epoch = samples_per_epoch(job.dir + "/samples");
  CHECK(per_epoch.size() == 2);
}

TEST_CASE("store loss e2e: a two-node job whose store host dies goes on with the survivor",
          "[e2e][store_loss]") {
  // A death is certain: the survivor alone carries the store on (no majority needed) and, with
  // MIN 1, runs on as a group of one. Expected: agent 0 137, agent 1 exits 0 after a round of 1.
  Job job;
  const std::map<std::string, std::string> env{{"NAP", "4"}};
  for (int i = 0; i < 2; ++i) job.start("1:2", {}, {kWorker}, env);
  REQUIRE(job.wait_for_all("WORLD_SIZE=2", {0, 1}));
  job.agents[0]->kill(SIGKILL);
  const auto codes = job.codes({0, 1});
  INFO(job.logs());
  CHECK(codes[0] == 128 + SIGKILL);
  CHECK(codes[1] == 0);
  CHECK_THAT(job.agents[1]->log(),
             Contains("GROUP_WORLD_SIZE=1 RESTARTS=1") && Contains("DONE RANK=0") &&
                 Contains("the store is now 127.0.0.2:") && !Contains("counting it as restart"));
}

TEST_CASE("store loss e2e: the store host and another node killed together", "[e2e][store_loss]") {
  // Four nodes, MIN 2: the store host and node 1 (whose standby may be the first successor)
  // are SIGKILLed at once. Expected: 0 and 1 137; 2 and 3 re-form as two on a surviving
  // standby and exit 0.
  Job job;
  const std::map<std::string, std::string> env{{"NAP", "5"}};
  for (int i = 0; i < 4; ++i) job.start("2:4", {}, {kWorker}, env);
  REQUIRE(job.wait_for_all("WORLD_SIZE=4", {0, 1, 2, 3}));
  job.agents[0]->kill(SIGKILL);
  job.agents[1]->kill(SIGKILL);
  const auto codes = job.codes({0, 1, 2, 3});
  INFO(job.logs());
  CHECK(codes[0] == 128 + SIGKILL);
  CHECK(codes[1] == 128 + SIGKILL);
  for (size_t i : {2u, 3u}) {
    INFO("agent " << i);
    CHECK(codes[i] == 0);
    CHECK_THAT(job.agents[i]->log(), Contains("GROUP_WORLD_SIZE=2") && Contains("DONE RANK="));
  }
}

TEST_CASE("store loss e2e: the successor killed as the store moves, the next one takes it",
          "[e2e][store_loss]") {
  // Four nodes: the store host is SIGKILLed, and the node whose standby the store moves to is
  // SIGKILLed as soon as the survivors say where it moved (during the takeover or just after
  // it: either way a death). Expected: the remaining two re-form on the next standby and exit 0.
  Job job;
  const std::map<std::string, std::string> env{{"NAP", "5"}};
  for (int i = 0; i < 4; ++i) job.start("2:4", {}, {kWorker}, env);
  REQUIRE(job.wait_for_all("WORLD_SIZE=4", {0, 1, 2, 3}));
  job.agents[0]->kill(SIGKILL);
  REQUIRE(job.wait_for_any("the store is now 127.0.0."));
  const std::regex moved("the store is now 127\\.0\\.0\\.(\\d+):");
  size_t successor = 0;
  for (size_t i = 1; i < 4 && successor == 0; ++i) {
    std::smatch m;
    const std::string log = job.agents[i]->log();
    if (std::regex_search(log, m, moved)) successor = std::stoul(m[1]) - 1;
  }
  REQUIRE(successor >= 1);
  job.agents[successor]->kill(SIGKILL);
  std::vector<size_t> rest;
  for (size_t i = 1; i < 4; ++i) {
    if (i != successor) rest.push_back(i);
  }
  const auto codes = job.codes(rest);
  INFO(job.logs());
  for (size_t k = 0; k < rest.size(); ++k) {
    INFO("agent " << rest[k]);
    CHECK(codes[k] == 0);
    CHECK_THAT(job.agents[rest[k]]->log(),
               Contains("GROUP_WORLD_SIZE=2") && Contains("DONE RANK="));
  }
}
