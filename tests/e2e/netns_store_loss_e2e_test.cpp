// Silence around the node that hosts the rendezvous store, on three network-namespace hosts
// (tests/support/netns.hpp): its link cut at the switch for good, or for a blip. A blip costs
// the stall and nothing else; a cut that lasts makes the host step down (it hears nothing from
// two of its three nodes) and the other two, a strict majority, carry the store on to a
// successor's standby after the tolerance, and take the host back once its link is. At no
// moment do two stores open rounds. Needs root and `ip`; skips with a message without.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cluster_job.hpp"
#include "tests/support/netns.hpp"

using namespace std::chrono_literals;
using ddp::test::ClusterJob;
using ddp::test::NetnsCluster;

namespace {

constexpr std::uint16_t kStorePort = 29511;
const std::string kJobWorker = std::string(DDP_SOURCE_DIR) + "/tests/e2e/scripts/job_worker.sh";
constexpr auto kGuard = 90s;

std::unique_ptr<NetnsCluster> cluster_or_skip() {
  std::string why_not;
  auto cluster = NetnsCluster::make(3, why_not);
  if (!cluster) WARN("SKIPPED: cannot make hosts from network namespaces here: " << why_not);
  return cluster;
}

std::vector<std::string> args_for(const NetnsCluster& cluster, std::size_t i,
                                  const std::string& tolerance) {
  return {"--nnodes",         "2:3",
          "--rdzv_backend",   "c10d",
          "--rdzv_endpoint",  cluster.host(0).addr() + ":" + std::to_string(kStorePort),
          "--rdzv_id",        "store-silence",
          "--local_addr",     cluster.host(i).addr(),
          "--peer_tolerance", tolerance,
          "--max_restarts",   "0",
          "--stop_timeout",   "2",
          "--rdzv_conf",      "join_timeout=60,last_call_timeout=1,exit_barrier_timeout=20",
          kJobWorker};
}

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("netns store loss: the store host cut off for good steps down, the majority goes on",
          "[e2e][netns][store_loss]") {
  // Expected: host 0 says it steps down (heard nothing from 2 of 3) and stops its worker;
  // hosts 1 and 2 move the store to a successor's standby and re-form as two; once host 0's
  // link is back it joins them (all three re-form), and every worker then runs to its end:
  // every agent exits 0.
  const auto cluster = cluster_or_skip();
  if (!cluster) return;
  const std::map<std::string, std::string> env{{"NAP", "14"}};
  ClusterJob job(*cluster);
  for (std::size_t i = 0; i < 3; ++i) job.start(i, args_for(*cluster, i, "4"), env);
  for (std::size_t a = 0; a < 3; ++a) REQUIRE(job.agent(a).wait_for_log("WORLD_SIZE=3", kGuard));
  cluster->cut_link(0, NetnsCluster::LinkEnd::kSwitch);
  {
    INFO(job.logs());
    REQUIRE(job.agent(0).wait_for_log("it steps down, so that the majority can carry the store on",
                                      30s));
    for (std::size_t a : {1u, 2u}) {
      REQUIRE(job.agent(a).wait_for_log("the store is now", 30s));
      REQUIRE(job.agent(a).wait_for_log("GROUP_WORLD_SIZE=2", 30s));
    }
  }
  cluster->restore_link(0);
  const auto codes = job.wait_all(kGuard);
  INFO(job.logs());
  for (std::size_t a = 0; a < 3; ++a) {
    INFO("agent " << a);
    CHECK(codes[a] == 0);
    CHECK(count(job.log(a), "DONE RANK=") == 1);
    CHECK_THAT(job.log(a), !Catch::Contains("counting it as restart"));
  }
  // Silence, not a death: the majority waited for the tolerance and moved by majority.
  CHECK_THAT(job.log(1) + job.log(2), !Catch::Contains("the node that hosted it is gone"));
  CHECK_THAT(job.log(0), Catch::Contains("GROUP_WORLD_SIZE=3 RESTARTS=2"));
}

TEST_CASE("netns store loss: a 5 s blip around the store host costs the stall, nothing else",
          "[e2e][netns][store_loss]") {
  // Expected: every agent exits 0, its worker started once and done once, no step-down, no
  // move, no re-form.
  const auto cluster = cluster_or_skip();
  if (!cluster) return;
  const std::map<std::string, std::string> env{{"NAP", "14"}};
  ClusterJob job(*cluster);
  for (std::size_t i = 0; i < 3; ++i) job.start(i, args_for(*cluster, i, "9"), env);
  for (std::size_t a = 0; a < 3; ++a) REQUIRE(job.agent(a).wait_for_log("WORLD_SIZE=3", kGuard));
  cluster->cut_link(0, NetnsCluster::LinkEnd::kSwitch);
  std::this_thread::sleep_for(5s);
  cluster->restore_link(0);
  const auto codes = job.wait_all(kGuard);
  INFO(job.logs());
  for (std::size_t a = 0; a < 3; ++a) {
    INFO("agent " << a);
    CHECK(codes[a] == 0);
    CHECK(count(job.log(a), "WORKER RANK=") == 1);
    CHECK(count(job.log(a), "DONE RANK=") == 1);
    CHECK_THAT(job.log(a), !Catch::Contains("steps down") && !Catch::Contains("the store is now") &&
                               !Catch::Contains("re-form"));
  }
}
