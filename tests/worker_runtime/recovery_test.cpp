// In-place recovery in one process: the worker's channel client against a fake agent on a
// socketpair, and the state agreement (pure decision, then over a Gloo group in threads).
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <thread>

#include "common/error.hpp"
#include "common/fd.hpp"
#include "rendezvous/store/memory_store.hpp"
#include "test_support.hpp"
#include "worker_runtime/dist_context.hpp"
#include "worker_runtime/recovery_client.hpp"
#include "worker_runtime/state_agreement.hpp"

using namespace ddp::worker_runtime;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
namespace recovery = ddp::recovery;

namespace {

// Counts abort() calls; every collective would be the identity (never called here).
class CountingGroup final : public ProcessGroup {
 public:
  CountingGroup() : ProcessGroup(0, 1) {}
  std::atomic<int> aborts{0};
  [[nodiscard]] std::string backend() const override { return "counting"; }
  void abort(const std::string& /*why*/) override { ++aborts; }

 protected:
  std::unique_ptr<Work> do_all_reduce(void*, size_t, DataType, ReduceOp, Duration) override {
    return nullptr;
  }
  std::unique_ptr<Work> do_all_reduce_coalesced(std::vector<std::span<float>>, ReduceOp,
                                                Duration) override {
    return nullptr;
  }
  void do_broadcast(void*, size_t, DataType, int, Duration) override {}
  void do_all_gather(const void*, void*, size_t, DataType, Duration) override {}
  void do_barrier(Duration) override {}
};

recovery::RoundNotice notice_of(int64_t round, int rank, int world) {
  recovery::RoundNotice n;
  n.round = round;
  n.rank = rank;
  n.world_size = world;
  n.group_world_size = world;
  n.master_addr = "127.0.0.1";
  n.master_port = 29400;
  return n;
}

// What init() is given for rank of world on the shared in-memory store, Gloo; fd: the
// worker's end of the agent's channel (-1: none, not in place).
InitOptions options_for(const std::shared_ptr<ddp::rendezvous::Store>& store, int rank, int world,
                        int fd = -1) {
  InitOptions o;
  o.store = store;
  o.env = {{"RANK", std::to_string(rank)},
           {"WORLD_SIZE", std::to_string(world)},
           {"MASTER_ADDR", "127.0.0.1"},
           {"MASTER_PORT", "1"},
           {"DDPLAUNCH_BACKEND", "gloo"}};
  if (fd >= 0) o.env[recovery::kEnvFd] = std::to_string(fd);
  return o;
}

}  // namespace

TEST_CASE("recovery client: hello, abort, round, bad lines, EOF", "[recovery]") {
  ddp::Fd worker_end;
  auto agent = test::AgentChannel::make(worker_end);
  auto client = std::make_unique<RecoveryClient>(std::move(worker_end), 2);
  CountingGroup group;
  client->set_group(&group);

  const auto hello = agent.read();
  CHECK(hello.type == "hello");
  CHECK(hello.integer("pid") == ::getpid());
  CHECK(hello.integer("local_rank") == 2);

  agent.send_raw("this is not a line\n");  // warned about and ignored
  agent.send(recovery::Message{"abort", {{"round", "0"}, {"reason", "node_lost"}}});
  const auto aborted = agent.read();
  CHECK(aborted.type == "aborted");
  CHECK(aborted.integer("round") == 0);
  CHECK(group.aborts == 1);
  CHECK(client->change_pending());

  agent.send(notice_of(1, 0, 2).to_message());
  CHECK(client->wait_round(10s) == notice_of(1, 0, 2));
  CHECK_FALSE(client->change_pending());
  CHECK(group.aborts == 1);  // the round after an abort does not abort twice

  // A round with no abort before it still ends the current group.
  agent.send(notice_of(2, 1, 3).to_message());
  CHECK(client->wait_round(10s).round == 2);
  CHECK(group.aborts == 2);

  client->send_joined(2, 1, 40, 0, 1234);
  const auto joined = agent.read();
  CHECK(joined.type == "joined");
  CHECK(joined.integer("step") == 40);
  CHECK(joined.integer("state_bytes") == 1234);
  client->send_stepped(2, 41);
  CHECK(agent.read().integer("step") == 41);

  CHECK_THROWS_WITH(client->wait_round(1ms), Contains("no round notice"));
  agent.fd.reset();  // the agent is gone
  // Fatal (RecoveryError), not one more change to recover from: the trainer would loop.
  CHECK_THROWS_AS(client->wait_round(10s), RecoveryError);
  CHECK_THROWS_WITH(client->wait_round(10s), Contains("closed the recovery channel"));
  CHECK_THROWS_AS(client->wait_change(10s), RecoveryError);
  CHECK_FALSE(client->connected());
}

TEST_CASE("recovery client: wait_change tells a membership change from a plain failure",
          "[recovery]") {
  ddp::Fd worker_end;
  auto agent = test::AgentChannel::make(worker_end);
  RecoveryClient client(std::move(worker_end), 0);
  CHECK(agent.read().type == "hello");
  // A collective failed and the agent announced nothing: not a recovery.
  CHECK_FALSE(client.wait_change(20ms));
  // An abort arriving while the worker waits wakes it.
  auto waiting = std::async(std::launch::async, [&] { return client.wait_change(10s); });
  agent.send(recovery::Message{"abort", {{"round", "0"}}});
  CHECK(waiting.get());
  CHECK(agent.read().type == "aborted");
  CHECK(client.wait_change(0ms));  // still pending until the round notice is taken
  agent.send(notice_of(1, 0, 2).to_message());
  CHECK(client.wait_round(10s) == notice_of(1, 0, 2));
  CHECK_FALSE(client.wait_change(20ms));  // taken: nothing new
}

TEST_CASE("recovery client: a group built after a change is aborted at once", "[recovery]") {
  ddp::Fd worker_end;
  auto agent = test::AgentChannel::make(worker_end);
  RecoveryClient client(std::move(worker_end), 0);
  CHECK(agent.read().type == "hello");
  agent.send(recovery::Message{"abort", {{"round", "3"}}});
  CHECK(agent.read().type == "aborted");
  CountingGroup late;
  client.set_group(&late);  // built for round 3, which is already over
  CHECK(late.aborts == 1);
  client.set_group(nullptr);
}

TEST_CASE("make_recovery_client: unset, bad and closed descriptors", "[recovery]") {
  CHECK(make_recovery_client({}, 0) == nullptr);
  CHECK(make_recovery_client({{recovery::kEnvFd, ""}}, 0) == nullptr);
  CHECK_THROWS_WITH(make_recovery_client({{recovery::kEnvFd, "three"}}, 0),
                    Contains("DDPLAUNCH_RECOVERY_FD='three'"));
  CHECK_THROWS_AS(make_recovery_client({{recovery::kEnvFd, "-1"}}, 0), ddp::ConfigError);
  CHECK_THROWS_AS(make_recovery_client({{recovery::kEnvFd, "999999"}}, 0), ddp::ConfigError);
}

namespace {

// A parked worker's env with its end of a channel whose agent already sent notice (the
// worker reads it once it said hello). The client adopts the descriptor.
EnvMap parked_env(test::AgentChannel& agent, EnvMap env, const recovery::RoundNotice& notice) {
  ddp::Fd worker_end;
  agent = test::AgentChannel::make(worker_end);
  agent.send(notice.to_message());
  env[recovery::kEnvFd] = std::to_string(worker_end.release());
  return env;
}

}  // namespace

TEST_CASE("await_admission: a spare's worker takes the round's values, keeps its LOCAL_RANK",
          "[recovery]") {
  EnvMap plain = {{"RANK", "0"}, {"LOCAL_RANK", "0"}};
  CHECK(await_admission(plain) == nullptr);
  CHECK(plain == EnvMap{{"RANK", "0"}, {"LOCAL_RANK", "0"}});

  test::AgentChannel agent;
  auto notice = notice_of(4, 5, 6);
  notice.local_world_size = 2;
  // Set by the agent at start, maybe virtual (--virtual_local_rank): the notice's is not used.
  notice.local_rank = 1;
  EnvMap env = parked_env(agent, {{recovery::kEnvSpare, "1"}, {"LOCAL_RANK", "0"}}, notice);
  auto client = await_admission(env);
  REQUIRE(client != nullptr);
  CHECK(agent.read().integer("local_rank") == 0);  // hello
  CHECK(env.at("RANK") == "5");
  CHECK(env.at("WORLD_SIZE") == "6");
  CHECK(env.at("LOCAL_WORLD_SIZE") == "2");
  CHECK(env.at("TORCHELASTIC_RESTART_COUNT") == "0");
  CHECK(env.at("LOCAL_RANK") == "0");
  CHECK(env.count(recovery::kEnvSpare) == 0);

  EnvMap no_local = {{recovery::kEnvSpare, "1"}};
  CHECK_THROWS_WITH(await_admission(no_local), Contains("LOCAL_RANK is not set"));
}

TEST_CASE("await_admission: a standby worker learns LOCAL_RANK from its notice", "[recovery]") {
  test::AgentChannel agent;
  auto notice = notice_of(7, 3, 4);
  notice.local_world_size = 4;
  notice.local_rank = 3;
  EnvMap env =
      parked_env(agent, {{recovery::kEnvSpare, "1"}, {recovery::kEnvStandby, "1"}}, notice);
  REQUIRE(env.count("LOCAL_RANK") == 0);
  auto client = await_admission(env);
  REQUIRE(client != nullptr);
  CHECK(agent.read().integer("local_rank") == 0);  // its place was not known yet
  CHECK(env.at("LOCAL_RANK") == "3");
  CHECK(env.at("RANK") == "3");
  CHECK(env.at("LOCAL_WORLD_SIZE") == "4");
  CHECK(env.count(recovery::kEnvSpare) == 0);
  CHECK(env.count(recovery::kEnvStandby) == 0);
  // The env contract of a worker started in that round.
  CHECK(parse_env(env).local_rank == 3);
}

TEST_CASE("await_admission: a standby's notice without local_rank, a standby that is no spare",
          "[recovery]") {
  test::AgentChannel agent;
  EnvMap env = parked_env(agent, {{recovery::kEnvSpare, "1"}, {recovery::kEnvStandby, "1"}},
                          notice_of(2, 1, 2));  // local_rank -1: not sent (an older agent)
  CHECK_THROWS_AS(await_admission(env), ddp::ProtocolError);
  test::AgentChannel again;
  EnvMap env2 = parked_env(again, {{recovery::kEnvSpare, "1"}, {recovery::kEnvStandby, "1"}},
                           notice_of(2, 1, 2));
  const std::string error = test::error_of([&] { (void)await_admission(env2); });
  CHECK_THAT(error, Contains("DDPLAUNCH_STANDBY=1"));
  CHECK_THAT(error, Contains("no local_rank: expected local_rank=<int> >= 0"));
  CHECK(env2.count("LOCAL_RANK") == 0);

  EnvMap lone = {{recovery::kEnvStandby, "1"}, {"RANK", "0"}};
  CHECK_THROWS_AS(await_admission(lone), ddp::ConfigError);
  CHECK_THROWS_WITH(await_admission(lone),
                    Contains("DDPLAUNCH_STANDBY=1 without DDPLAUNCH_SPARE=1"));
}

TEST_CASE("state agreement: the last step every survivor completed, from the lowest rank",
          "[recovery]") {
  using V = std::vector<int64_t>;
  auto decide = [](V live, V step) { return decide_state(live, step); };
  // Nobody live: everyone loads the checkpoint.
  CHECK(decide({0, 0, 0}, {0, 0, 0}) == StateAgreement{false, 0, -1, false});
  // All live at one step: nothing to send.
  CHECK(decide({1, 1}, {7, 7}) == StateAgreement{true, 7, 0, false});
  // A fresh rank joins: state comes from rank 0.
  CHECK(decide({1, 1, 0}, {7, 7, 0}) == StateAgreement{true, 7, 0, true});
  // Rank 0 got one step further: rank 1 (the lowest at the minimum) sends step 7.
  CHECK(decide({1, 1, 0}, {8, 7, 0}) == StateAgreement{true, 7, 1, true});
  CHECK(decide({0, 1, 1}, {0, 5, 5}) == StateAgreement{true, 5, 1, true});
}

TEST_CASE("state agreement: a newer lineage wins over an older one at the same step",
          "[recovery]") {
  using V = std::vector<int64_t>;
  // (live, step, lineage, round) per rank. A rank paused in round 0 comes back at step 2535;
  // the other two restarted in round 2 from a checkpoint and caught up to the same step. The
  // same step is not the same state: the paused rank receives the newer lineage's.
  StateAgreement got = decide_state(V{1, 1, 1}, V{2535, 2535, 2535}, V{0, 2, 2}, V{3, 3, 3});
  CHECK(got == StateAgreement{true, 2535, 1, true, 3});
  // One step ahead or not, an older lineage is never the source.
  got = decide_state(V{1, 1}, V{2536, 2535}, V{0, 2}, V{3, 3});
  CHECK(got == StateAgreement{true, 2535, 1, true, 3});
  // One lineage, one step: nothing to send; every rank's state now belongs to round 3.
  got = decide_state(V{1, 1}, V{7, 7}, V{2, 2}, V{3, 3});
  CHECK(got == StateAgreement{true, 7, 0, false, 3});
  // Nobody live: the checkpoint, in round 4's lineage.
  got = decide_state(V{0, 0}, V{0, 0}, V{-1, -1}, V{4, 4});
  CHECK(got == StateAgreement{false, 0, -1, false, 4});
}

TEST_CASE("state agreement over a Gloo group", "[recovery][gloo]") {
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>();
  test::run_ranks(3, [&](int rank) {
    auto pg = test::make_group(store, rank, 3);
    const StateAgreement got = agree_on_state(*pg, rank != 1, rank == 0 ? 12 : 11);
    RT_LOCKED(CHECK(got == StateAgreement{true, 11, 2, true}));
  });
}

TEST_CASE("DistContext::recover: survivors of a world of 3 rebuild a group of 2 in place",
          "[recovery][gloo]") {
  auto base = std::make_shared<ddp::rendezvous::MemoryStore>();
  std::vector<test::AgentChannel> agents(3);
  std::vector<ddp::Fd> worker_ends(3);
  for (size_t r = 0; r < 3; ++r) agents[r] = test::AgentChannel::make(worker_ends[r]);
  std::promise<void> lost;  // rank 2 is gone once 0 and 1 have seen their all-reduce fail
  auto lost_future = lost.get_future().share();
  std::atomic<int> failed{0};
  // The agent: every hello, then abort and a round of world 2 to ranks 0 and 1.
  std::thread agent([&] {
    try {
      auto expect = [](const recovery::Message& m, const char* type) {
        if (m.type != type) throw std::runtime_error("expected " + std::string(type));
      };
      for (auto& a : agents) expect(a.read(), "hello");
      for (size_t r = 0; r < 2; ++r) agents[r].send({"abort", {{"round", "0"}}});
      for (size_t r = 0; r < 2; ++r) expect(agents[r].read(), "aborted");
      for (size_t r = 0; r < 2; ++r) {
        agents[r].send(notice_of(1, static_cast<int>(r), 2).to_message());
      }
    } catch (const std::exception& e) {
      RT_LOCKED(FAIL(e.what()));
    }
  });
  test::run_ranks(3, [&](int rank) {
    auto ctx = init(options_for(base, rank, 3, worker_ends[static_cast<size_t>(rank)].get()));
    (void)worker_ends[static_cast<size_t>(rank)].release();  // the client owns it now
    RT_LOCKED(CHECK(ctx->in_place()));
    RT_LOCKED(CHECK(ctx->round() == 0));
    if (rank == 2) {
      lost_future.wait();
      return;  // the lost node: never takes part again
    }
    std::vector<int64_t> v = {1};
    const std::string error =
        test::error_of([&] { ctx->process_group().all_reduce(std::span<int64_t>(v)); });
    RT_LOCKED(CHECK_THAT(error, Contains("abort")));
    if (++failed == 2) lost.set_value();
    const auto notice = ctx->recover(30s);
    RT_LOCKED(CHECK(notice.round == 1));
    RT_LOCKED(CHECK(ctx->rank() == rank));
    RT_LOCKED(CHECK(ctx->world_size() == 2));
    RT_LOCKED(CHECK(ctx->round() == 1));
    v = {10};
    ctx->process_group().all_reduce(std::span<int64_t>(v));
    RT_LOCKED(CHECK(v[0] == 20));
    ctx->store().set("survivor/" + std::to_string(rank), "x");
  });
  agent.join();
  CHECK(base->check({"/worker/attempt_1/survivor/0", "/worker/attempt_1/survivor/1"}));
}

TEST_CASE("init: ranks that disagree on in-place recovery fail at once, saying so",
          "[recovery][gloo]") {
  // One node started with --in_place_recovery, the other without: the first would run the
  // state agreement while the other trains, and after a change they would run different
  // collectives. Both ranks refuse at init instead, with the same readable reason.
  auto base = std::make_shared<ddp::rendezvous::MemoryStore>();
  ddp::Fd worker_end;
  auto agent = test::AgentChannel::make(worker_end);
  std::vector<std::string> errors(2);
  test::run_ranks(2, [&](int rank) {
    try {
      auto ctx = init(options_for(base, rank, 2, rank == 0 ? worker_end.get() : -1));
    } catch (const ddp::ConfigError& e) {
      errors[static_cast<size_t>(rank)] = e.what();
    }
  });
  (void)worker_end.release();  // rank 0's client owned it
  for (const auto& error : errors) {
    CHECK_THAT(error, Contains("1 rank(s) run under ddplaunch --in_place_recovery and 1 without"));
    CHECK_THAT(error, Contains("start every node of the job with the same flags"));
  }
  CHECK_THAT(errors[0], Contains("this rank with)"));
  CHECK_THAT(errors[1], Contains("this rank without)"));
}

TEST_CASE("init: ranks that agree on the mode build their group as before", "[recovery][gloo]") {
  auto base = std::make_shared<ddp::rendezvous::MemoryStore>();
  test::run_ranks(2, [&](int rank) {
    auto ctx = init(options_for(base, rank, 2));
    std::vector<int64_t> v = {rank + 1};
    ctx->process_group().all_reduce(std::span<int64_t>(v));
    RT_LOCKED(CHECK(v[0] == 3));
  });
  CHECK(base->add("/worker/attempt_0/runtime/classic_ranks", 0) == 2);
  CHECK(base->add("/worker/attempt_0/runtime/in_place_ranks", 0) == 0);
}

TEST_CASE("DistContext::recover: a second change while the new group is built ends the build",
          "[recovery][gloo]") {
  // Round 1 expects 3 ranks, but rank 2 died before it published its address. Ranks 0 and 1
  // wait for it in the build; the agent re-forms again (round 2, world 2). The build must end
  // at the announcement, not at the connect timeout (20 s here, 5 min by default, longer than
  // the agent's --recovery_timeout), and the next recover() must build round 2.
  auto base = std::make_shared<ddp::rendezvous::MemoryStore>();
  std::vector<test::AgentChannel> agents(2);
  std::vector<ddp::Fd> worker_ends(2);
  for (size_t r = 0; r < 2; ++r) agents[r] = test::AgentChannel::make(worker_ends[r]);
  std::atomic<int> failed{0};
  std::atomic<int> building{0};
  std::thread agent([&] {
    try {
      auto expect = [](const recovery::Message& m, const char* type) {
        if (m.type != type) throw std::runtime_error("expected " + std::string(type));
      };
      for (auto& a : agents) expect(a.read(), "hello");
      for (auto& a : agents) a.send({"abort", {{"round", "0"}}});
      for (auto& a : agents) expect(a.read(), "aborted");
      for (size_t r = 0; r < 2; ++r) {
        agents[r].send(notice_of(1, static_cast<int>(r), 3).to_message());
      }
      // Both are in round 1's build (or about to be: the outcome is the same).
      while (building.load() < 2) std::this_thread::sleep_for(1ms);
      std::this_thread::sleep_for(200ms);
      for (auto& a : agents) a.send({"abort", {{"round", "1"}, {"reason", "node_lost"}}});
      for (auto& a : agents) expect(a.read(), "aborted");
      for (size_t r = 0; r < 2; ++r) {
        agents[r].send(notice_of(2, static_cast<int>(r), 2).to_message());
      }
    } catch (const std::exception& e) {
      RT_LOCKED(FAIL(e.what()));
    }
  });
  test::run_ranks(2, [&](int rank) {
    auto o = options_for(base, rank, 2, worker_ends[static_cast<size_t>(rank)].get());
    o.store_timeout = 20s;  // a regression fails here with a timeout, not a 5-minute hang
    auto ctx = init(o);
    (void)worker_ends[static_cast<size_t>(rank)].release();  // the client owns it now
    RT_LOCKED(CHECK(ctx->recovery()->wait_change(30s)));     // round 0 aborted
    ++building;
    const std::string interrupted = test::error_of([&] { ctx->recover(30s); });
    RT_LOCKED(
        CHECK_THAT(interrupted, Contains("membership changed again while the group of round 1")));
    RT_LOCKED(CHECK_THAT(interrupted, !Contains("timed out")));
    ++failed;
    const auto notice = ctx->recover(30s);
    RT_LOCKED(CHECK(notice.round == 2));
    RT_LOCKED(CHECK(ctx->world_size() == 2));
    std::vector<int64_t> v = {rank + 1};
    ctx->process_group().all_reduce(std::span<int64_t>(v));
    RT_LOCKED(CHECK(v[0] == 3));
  });
  agent.join();
  CHECK(failed.load() == 2);
}
