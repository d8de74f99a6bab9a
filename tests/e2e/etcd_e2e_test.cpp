// The etcd v3 rendezvous end to end (docs/etcd.md): real ddplaunch agents as nodes on
// 127.0.0.x, real etcd members started by the tests (tests/support/etcd_cluster.hpp).
#include <signal.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <memory>
#include <regex>
#include <set>
#include <thread>

#include "agent_process.hpp"
#include "rendezvous/store/etcd/etcd_store.hpp"
#include "tests/support/etcd_cluster.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_certificates.hpp"
#include "tests/support/wait_until.hpp"

using namespace std::chrono_literals;
using ddp::test::AgentProcess;
using ddp::test::EtcdCluster;
using ddp::test::ranks_in;

namespace {

constexpr auto kGuard = 60s;  // hang guard; nothing asserts on speed
const std::string kScripts = std::string(DDP_SOURCE_DIR) + "/tests/e2e/scripts/";
// Short windows so the suite stays quick: a 2 s lease (etcd's TTL unit is the second).
const std::string kFastConf = "last_call_timeout=1,join_timeout=30,lease_timeout=2";

std::string joined(const std::vector<std::string>& endpoints) {
  std::string text;
  for (const auto& e : endpoints) text += (text.empty() ? "" : ",") + e;
  return text;
}

struct Job {
  std::string dir = ddp::test::make_temp_dir();
  std::vector<std::unique_ptr<AgentProcess>> agents;

  // Starts `ddplaunch --rdzv_backend etcd-v3 ...` as node addr running program (worker.sh by
  // default).
  AgentProcess& start(const std::string& tag, const std::string& endpoints,
                      const std::string& nnodes, const std::string& addr,
                      std::map<std::string, std::string> env = {}, const std::string& extra = "",
                      const std::string& program = kScripts + "worker.sh",
                      const std::string& backend = "etcd-v3", const std::string& id = "etcd-e2e") {
    std::vector<std::string> args = {"--nnodes",
                                     nnodes,
                                     "--nproc_per_node",
                                     "2",
                                     "--rdzv_backend",
                                     backend,
                                     "--rdzv_endpoint",
                                     endpoints,
                                     "--rdzv_id",
                                     id,
                                     "--rdzv_conf",
                                     kFastConf + extra,
                                     "--local_addr",
                                     addr,
                                     program};
    env["NODE_TAG"] = tag;
    env["PID_DIR"] = dir;
    agents.push_back(std::make_unique<AgentProcess>(args, env, dir + "/" + tag + ".log"));
    return *agents.back();
  }
  ~Job() {
    agents.clear();  // SIGKILL + reap whatever still runs
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

std::set<int> all_ranks(const std::string& logs, int world_size) {
  return ranks_in(logs, world_size);
}

// Keys of job id under its prefix, read by a client of our own.
int64_t job_keys(const std::vector<std::string>& endpoints, const std::string& id) {
  ddp::rendezvous::EtcdStoreOptions o;
  o.endpoints = endpoints;
  o.prefix = "/ddplaunch/" + id + "/";
  o.timeout = 5s;
  return ddp::rendezvous::EtcdStore(o).num_keys();
}

}  // namespace

TEST_CASE("etcd e2e: a fixed-size 2-node job gets ranks 0..3 and one workers' store",
          "[e2e][etcd]") {
  EtcdCluster etcd;
  Job job;
  auto& a = job.start("a", etcd.endpoint(0), "2", "127.0.0.1");
  // torchrun's name for its v2 backend: served by the v3 one, with a notice.
  auto& b =
      job.start("b", etcd.endpoint(0), "2", "127.0.0.2", {}, "", kScripts + "worker.sh", "etcd-v2");
  REQUIRE(a.wait(kGuard) == 0);
  REQUIRE(b.wait(kGuard) == 0);
  INFO(a.log() + b.log());
  CHECK(all_ranks(a.log() + b.log(), 4) == std::set<int>{0, 1, 2, 3});
  // Group rank 0 serves the workers' store; every worker of both nodes dials the same one.
  CHECK_THAT(a.log() + b.log(), Catch::Contains("serving the workers' store on 127.0.0."));
  const std::regex master("MASTER=([0-9.]+:[0-9]+)");
  std::set<std::string> masters;
  const std::string logs = a.log() + b.log();
  for (auto it = std::sregex_iterator(logs.begin(), logs.end(), master);
       it != std::sregex_iterator(); ++it) {
    masters.insert((*it)[1]);
  }
  CHECK(masters.size() == 1);
  CHECK_THAT(b.log(), Catch::Contains("ddplaunch speaks etcd's v3 API"));
  // Every key of the job lives under /ddplaunch/<rdzv_id>/.
  CHECK(job_keys(etcd.endpoints(), "etcd-e2e") > 0);
  CHECK(job_keys(etcd.endpoints(), "another-job") == 0);
}

TEST_CASE("etcd e2e: a node joining an elastic job mid-run grows the world", "[e2e][etcd]") {
  EtcdCluster etcd;
  Job job;
  const std::map<std::string, std::string> env{{"EXIT_AT_NODES", "2"}};
  auto& a = job.start("a", etcd.endpoint(0), "1:2", "127.0.0.1", env);
  REQUIRE(a.wait_for_log("GROUP_WORLD_SIZE=1 ", kGuard));
  auto& b = job.start("b", etcd.endpoint(0), "1:2", "127.0.0.2", env);
  REQUIRE(a.wait(kGuard) == 0);
  REQUIRE(b.wait(kGuard) == 0);
  INFO(a.log() + b.log());
  CHECK_THAT(a.log(), Catch::Contains("a new node is waiting to join"));
  CHECK(all_ranks(a.log() + b.log(), 4) == std::set<int>{0, 1, 2, 3});
}

TEST_CASE("etcd e2e: a SIGKILLed node's lease expires and the survivor re-forms", "[e2e][etcd]") {
  EtcdCluster etcd;
  Job job;
  const std::map<std::string, std::string> env{{"EXIT_AT_NODES", "1"}};
  auto& a = job.start("a", etcd.endpoint(0), "1:2", "127.0.0.1", env);
  auto& b = job.start("b", etcd.endpoint(0), "1:2", "127.0.0.2", env);
  REQUIRE(a.wait_for_log("GROUP_WORLD_SIZE=2 ", kGuard));
  REQUIRE(b.wait_for_log("GROUP_WORLD_SIZE=2 ", kGuard));
  b.kill(SIGKILL);
  REQUIRE(a.wait(kGuard) == 0);
  INFO(a.log());
  CHECK_THAT(a.log(), Catch::Contains("expired"));
  CHECK_THAT(a.log(), Catch::Contains("is gone (its lease expired)"));
  // The re-formed one-node group; its workers' store is a's own, even when b (the agent that
  // served the first round's) was group rank 0.
  CHECK_THAT(a.log(), Catch::Contains("RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 GROUP_RANK=0 "
                                      "GROUP_WORLD_SIZE=1 MASTER=127.0.0.1:"));
  CHECK_THAT(a.log(), Catch::Contains("RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 GROUP_RANK=0 "
                                      "GROUP_WORLD_SIZE=1 MASTER=127.0.0.1:"));
}

TEST_CASE("etcd e2e: a SIGKILLed node is noticed at once through the workers' store",
          "[e2e][etcd][store_loss]") {
  // A 60 s lease: only the death witness can explain a quick re-form. Three nodes; whichever
  // node is killed (group rank 0, which serves the workers' store, or another), the node that
  // sees its connection to the workers' store close ends its lease at once and the survivors
  // re-form as two. Expected: the killed agent 137, the other two 0, each saying why.
  const bool kill_host = GENERATE(true, false);
  INFO((kill_host ? "group rank 0 (the workers' store) killed" : "a member killed"));
  EtcdCluster etcd;
  Job job;
  const std::map<std::string, std::string> env{{"EXIT_AT_NODES", "2"}};
  const std::string conf = ",lease_timeout=60,join_timeout=120";
  std::vector<AgentProcess*> agents;
  for (const char* addr : {"127.0.0.1", "127.0.0.2", "127.0.0.3"}) {
    agents.push_back(
        &job.start(std::string("n") + addr[8], etcd.endpoint(0), "2:3", addr, env, conf));
  }
  for (auto* a : agents) REQUIRE(a->wait_for_log("GROUP_WORLD_SIZE=3 ", kGuard));
  size_t host = 0;
  for (size_t i = 0; i < agents.size(); ++i) {
    if (agents[i]->log().find("this node is group rank 0: serving the workers' store") !=
        std::string::npos) {
      host = i;
    }
  }
  const size_t victim = kill_host ? host : (host + 1) % agents.size();
  const auto killed = std::chrono::steady_clock::now();
  agents[victim]->kill(SIGKILL);
  for (size_t i = 0; i < agents.size(); ++i) {
    if (i == victim) continue;
    INFO("agent " << i << "\n" << agents[i]->log());
    REQUIRE(agents[i]->wait(kGuard) == 0);
    CHECK_THAT(agents[i]->log(), Catch::Contains("GROUP_WORLD_SIZE=2 "));
  }
  // Long before the 60 s lease could have run out.
  CHECK(std::chrono::steady_clock::now() - killed < 30s);
  std::string survivors;
  for (size_t i = 0; i < agents.size(); ++i) {
    if (i != victim) survivors += agents[i]->log();
  }
  CHECK_THAT(survivors, Catch::Contains("closed its connection to the workers' store: it is gone; "
                                        "ending its presence now"));
}

TEST_CASE("etcd e2e: the member the agents talk to dies mid-rendezvous", "[e2e][etcd]") {
  EtcdCluster etcd(3);
  Job job;
  const std::string endpoints = joined(etcd.endpoints());
  auto& a = job.start("a", endpoints, "2", "127.0.0.1");
  // a has arrived and waits for the second node.
  REQUIRE(ddp::test::wait_until([&] { return job_keys({etcd.endpoint(1)}, "etcd-e2e") > 0; }, 30s));
  etcd.kill(0);
  auto& b = job.start("b", endpoints, "2", "127.0.0.2");
  const auto a_status = a.wait(kGuard);
  const auto b_status = b.wait(kGuard);
  INFO("a:\n" << a.log() << "b:\n" << b.log());
  REQUIRE(a_status == 0);
  REQUIRE(b_status == 0);
  CHECK(all_ranks(a.log() + b.log(), 4) == std::set<int>{0, 1, 2, 3});
  CHECK_THAT(a.log(), Catch::Contains("moving on to http://" + etcd.endpoint(1)));
}

TEST_CASE("etcd e2e: the member the agents talk to dies mid-run and the job goes on",
          "[e2e][etcd]") {
  EtcdCluster etcd(3);
  Job job;
  const std::string endpoints = joined(etcd.endpoints());
  const std::map<std::string, std::string> env{{"LINGER", "6"}};
  auto& a = job.start("a", endpoints, "2", "127.0.0.1", env, "", kScripts + "linger.sh");
  auto& b = job.start("b", endpoints, "2", "127.0.0.2", env, "", kScripts + "linger.sh");
  REQUIRE(a.wait_for_log("WORKER RANK", kGuard));
  REQUIRE(b.wait_for_log("WORKER RANK", kGuard));
  etcd.kill(0);
  REQUIRE(a.wait(kGuard) == 0);
  REQUIRE(b.wait(kGuard) == 0);
  INFO(a.log() + b.log());
  // Nobody was taken for lost: one attempt, no re-forming.
  CHECK_THAT(a.log() + b.log(), !Catch::Contains("membership changed"));
  CHECK_THAT(a.log() + b.log(), !Catch::Contains("RESTARTS=1"));
  CHECK(all_ranks(a.log() + b.log(), 4) == std::set<int>{0, 1, 2, 3});
}

TEST_CASE("etcd e2e: PyTorch DDP on two nodes, with a job secret", "[e2e][etcd][torch]") {
  EtcdCluster etcd;
  Job job;
  ddp::test::TempDir secret_dir;
  const std::string secret = secret_dir.write("secret", "etcd-e2e-secret-0123456789abcdef\n");
  std::filesystem::permissions(
      secret, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  const std::map<std::string, std::string> env{{"PYTHON_EXEC", "/usr/bin/python3"},
                                               {"DDPLAUNCH_SECRET_FILE", secret}};
  // DistributedDataParallel training (20 SGD steps on gloo), then the parameters of all four
  // ranks compared; the workers meet on the TCP store group rank 0's agent serves.
  const std::string ddp = std::string(DDP_SOURCE_DIR) + "/tests/launcher/workers/ddp_train.py";
  auto& a = job.start("a", etcd.endpoint(0), "2", "127.0.0.1", env, "", ddp);
  auto& b = job.start("b", etcd.endpoint(0), "2", "127.0.0.2", env, "", ddp);
  REQUIRE(a.wait(kGuard) == 0);
  REQUIRE(b.wait(kGuard) == 0);
  const std::string logs = a.log() + b.log();
  INFO(logs);
  for (int rank = 0; rank < 4; ++rank) {
    CHECK_THAT(logs, Catch::Contains("rank " + std::to_string(rank) + "/4 agent_store=True"));
  }
  CHECK_THAT(logs, Catch::Contains("params in sync after 20 steps"));
}

TEST_CASE("etcd e2e: TLS with a CA and client certificates", "[e2e][etcd]") {
  const ddp::test::TestCertificates certs;
  ddp::test::EtcdTls tls;
  tls.cert_file = certs.cert("server");
  tls.key_file = certs.key("server");
  tls.client_ca_file = certs.ca();
  EtcdCluster etcd(1, 30s, tls);
  Job job;
  const std::string conf =
      ",cacert=" + certs.ca() + ",cert=" + certs.cert("client") + ",key=" + certs.key("client");
  auto& a = job.start("a", etcd.endpoint(0), "2", "127.0.0.1", {}, conf + ",protocol=https");
  auto& b = job.start("b", "https://" + etcd.endpoint(0), "2", "127.0.0.2", {}, conf);
  REQUIRE(a.wait(kGuard) == 0);
  REQUIRE(b.wait(kGuard) == 0);
  INFO(a.log() + b.log());
  CHECK(all_ranks(a.log() + b.log(), 4) == std::set<int>{0, 1, 2, 3});

  // Without a client certificate the member refuses us: a clear error, no hang.
  auto& c = job.start("c", etcd.endpoint(0), "2", "127.0.0.3", {},
                      ",join_timeout=2,protocol=https,cacert=" + certs.ca());
  const auto rc = c.wait(kGuard);
  REQUIRE(rc.has_value());
  CHECK(*rc != 0);
  CHECK_THAT(c.log(), Catch::Contains("https://" + etcd.endpoint(0)));
  CHECK_THAT(c.log(), Catch::Contains("certificate"));
}

TEST_CASE("etcd e2e: a cluster with authentication, user and password_file", "[e2e][etcd]") {
  EtcdCluster etcd;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"user", "add", "root:s3cret"},
        std::vector<std::string>{"auth", "enable"}}) {
    std::vector<std::string> argv = {"/usr/bin/etcdctl", "--endpoints=http://" + etcd.endpoint(0)};
    argv.insert(argv.end(), args.begin(), args.end());
    REQUIRE(ddp::test::run_process(argv, 30s).exit_code == 0);
  }
  ddp::test::TempDir files;
  const std::string password = files.write("password", "s3cret\n");
  std::filesystem::permissions(
      password, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  Job job;
  const std::string conf = ",user=root,password_file=" + password;
  auto& a = job.start("a", etcd.endpoint(0), "2", "127.0.0.1", {}, conf);
  auto& b = job.start("b", etcd.endpoint(0), "2", "127.0.0.2", {}, conf);
  REQUIRE(a.wait(kGuard) == 0);
  REQUIRE(b.wait(kGuard) == 0);
  CHECK(all_ranks(a.log() + b.log(), 4) == std::set<int>{0, 1, 2, 3});

  // A password file others can read is refused before anything is dialled.
  std::filesystem::permissions(password, std::filesystem::perms::group_read,
                               std::filesystem::perm_options::add);
  auto& c = job.start("c", etcd.endpoint(0), "2", "127.0.0.3", {}, conf);
  REQUIRE(c.wait(kGuard) == 2);
  CHECK_THAT(c.log(), Catch::Contains(password) && Catch::Contains("0640"));
  // A wrong user: etcd's own message, after the join timeout.
  std::filesystem::permissions(password, std::filesystem::perms::group_read,
                               std::filesystem::perm_options::remove);
  auto& d = job.start("d", etcd.endpoint(0), "2", "127.0.0.4", {},
                      ",join_timeout=1,user=nobody,password_file=" + password);
  const auto rc = d.wait(kGuard);
  REQUIRE(rc.has_value());
  CHECK(*rc != 0);
  CHECK_THAT(d.log(), Catch::Contains("authenticat"));
}

TEST_CASE("etcd e2e: etcd down at start is an error naming every member after join_timeout",
          "[e2e][etcd]") {
  Job job;
  const std::string one = "127.0.0.1:" + std::to_string(ddp::test::free_loopback_port());
  const std::string two = "127.0.0.1:" + std::to_string(ddp::test::free_loopback_port());
  const auto started = std::chrono::steady_clock::now();
  auto& a = job.start("a", one + "," + two, "2", "127.0.0.1", {}, ",join_timeout=2");
  const auto rc = a.wait(kGuard);
  const auto took = std::chrono::steady_clock::now() - started;
  INFO(a.log());
  REQUIRE(rc.has_value());
  CHECK(*rc != 0);
  CHECK_THAT(a.log(), Catch::Contains("no member answered"));
  CHECK_THAT(a.log(), Catch::Contains("http://" + one) && Catch::Contains("http://" + two));
  CHECK(took >= 2s);  // it kept trying for the whole join timeout
}
