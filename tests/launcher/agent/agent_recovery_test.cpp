// The agent's side of in-place recovery (docs/recovery.md), with fake workers that speak the
// recovery protocol over the real socketpairs the agent makes.
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "common/recovery_protocol.hpp"
#include "tests/launcher/agent/agent_harness.hpp"
#include "tests/launcher/agent/worker_channel.hpp"

using namespace ddp::launcher;
using ddp::launcher::testing::Harness;
using ddp::launcher::testing::make_message;
using ddp::launcher::testing::WorkerChannel;
using ddp::recovery::Message;
using ddp::rendezvous::MembershipChange;
namespace asio = boost::asio;

namespace {

// Fake workers that say hello, answer abort and round as the runtime does, and exit 0 once
// they made their first step in the new round.
struct RecoveringWorkers {
  explicit RecoveringWorkers(Harness& harness) : h(harness) {
    h.options.config.in_place_recovery = true;
    h.events_path = h.options.run_dir.string() + ".events";
    h.spawner.on_spawn = [this](size_t i) { start(i); };
    h.on_event = [this](const nlohmann::json& event) {
      if (on_event) on_event(event);
      // The workers' lines are all in once the agent reports the recovery: they finish then
      // (exiting right after writing them could end the agent before it read them).
      if (event.value("event", "") == "in_place_recovery") {
        asio::post(h.io, [this] {
          for (size_t i = 0; i < h.spawner.workers.size(); ++i) h.spawner.exit(i, ExitStatus{});
        });
      }
    };
  }
  // What the test does on each event, before the above.
  std::function<void(const nlohmann::json&)> on_event;
  ~RecoveringWorkers() { std::filesystem::remove(*h.events_path); }

  void start(size_t i) {
    auto& worker = h.spawner.workers.at(i);
    REQUIRE(worker.channel);
    CHECK(h.spawner.env(i, "DDPLAUNCH_RECOVERY_FD") == "3");
    channels[i] = std::make_unique<WorkerChannel>(
        h.io, *worker.channel, [this, i](const Message& m) { on_message(i, m); });
    channels[i]->send(make_message("hello", {{"pid", worker.pid}, {"local_rank", 0}}));
    if (answer_fresh) on_fresh(i);
  }

  void on_message(size_t i, const Message& m) {
    received[i].push_back(m);
    if (m.type == "abort") {
      channels[i]->send(make_message("aborted", {{"round", m.integer("round")}}));
    } else if (m.type == "round" && answer_round && silent.count(i) == 0) {
      const int64_t round = m.integer("round");
      channels[i]->send(make_message("joined", {{"round", round},
                                                {"rank", m.integer("rank")},
                                                {"step", 7},
                                                {"source", -1},
                                                {"state_bytes", 0}}));
      channels[i]->send(make_message("stepped", {{"round", round}, {"step", 8}}));
    }
  }

  // What a fresh worker of a later round does: re-form and finish.
  void on_fresh(size_t i) {
    if (h.spawner.env(i, "DDPLAUNCH_STANDBY") == "1") return;  // it waits for its notice
    const int64_t round = std::stoll(h.spawner.env(i, "TORCHELASTIC_RESTART_COUNT"));
    if (round == 0) return;
    channels[i]->send(make_message("joined", {{"round", round},
                                              {"rank", std::stoll(h.spawner.env(i, "RANK"))},
                                              {"step", 7},
                                              {"source", 0},
                                              {"state_bytes", 1024}}));
    channels[i]->send(make_message("stepped", {{"round", round}, {"step", 8}}));
  }

  [[nodiscard]] std::vector<nlohmann::json> events(const std::string& name) const {
    std::vector<nlohmann::json> out;
    std::ifstream in(*h.events_path);
    for (std::string line; std::getline(in, line);) {
      auto event = nlohmann::json::parse(line);
      if (event.value("event", "") == name) out.push_back(event);
    }
    return out;
  }

  Harness& h;
  bool answer_round = true;
  std::set<size_t> silent;  // slots that do not answer their round notice
  bool answer_fresh = true;
  std::map<size_t, std::unique_ptr<WorkerChannel>> channels;
  std::map<size_t, std::vector<Message>> received;
};

// One standby per node; once it listens (in round 0), process `failing` (a worker) exits 3.
void fail_once_standby_listens(Harness& h, RecoveringWorkers& workers, size_t failing) {
  h.options.config.standby_workers = 1;
  workers.on_event = [&h, failing](const nlohmann::json& event) {
    if (event.value("event", "") == "standby_ready" && h.rendezvous.calls == 1) {
      asio::post(h.io, [&h, failing] { h.spawner.exit(failing, ExitStatus{3, 0}); });
    }
  };
}

}  // namespace

TEST_CASE(
    "in place: a lost node keeps this node's workers, which get abort and then their new rank",
    "[agent][recovery]") {
  Harness h(2);
  RecoveringWorkers workers(h);
  h.rendezvous.members = "a,b,c";
  int hellos = 0;
  workers.on_event = [&](const nlohmann::json& event) {
    // Both workers listen: another node is lost.
    if (event.value("event", "") == "worker_channel" && ++hellos == 2) {
      h.rendezvous.members = "a,b";
      h.rendezvous.change(MembershipChange::kNodeLost);
    }
  };
  CHECK(h.run() == 0);
  CHECK(h.rendezvous.calls == 2);
  CHECK(h.restarts == 0);
  // Nobody was restarted: the same two processes finished the job.
  REQUIRE(h.spawner.workers.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(h.spawner.workers[i].signals.empty());
    REQUIRE(workers.received[i].size() == 2);
    const Message& abort = workers.received[i][0];
    CHECK(abort.type == "abort");
    CHECK(abort.text("reason") == "node_lost");
    CHECK(abort.integer("round") == 0);
    const auto notice = ddp::recovery::RoundNotice::from_message(workers.received[i][1]);
    CHECK(notice.round == 1);
    CHECK(notice.restart_count == 1);
    CHECK(notice.rank == static_cast<int>(i));
    CHECK(notice.world_size == 2);
    CHECK(notice.master_port == 29999);
  }
  const auto done = workers.events("in_place_recovery");
  REQUIRE(done.size() == 1);
  CHECK(done[0]["reason"] == "node_lost");
  CHECK(done[0]["kept"] == 2);
  CHECK(done[0]["restarted"] == 0);
  CHECK(done[0]["step"] == 7);
  for (const char* phase : {"aborted_ms", "reformed_ms", "state_sent_ms", "first_step_ms"}) {
    CHECK(done[0][phase].get<int64_t>() >= 0);
  }
  CHECK(done[0]["aborted_ms"] <= done[0]["first_step_ms"]);
  CHECK(h.logged("1 in-place recovery"));
}

TEST_CASE("in place: a worker that died during the re-form is started afresh in the new round",
          "[agent][recovery]") {
  Harness h(2);
  RecoveringWorkers workers(h);
  int hellos = 0;
  workers.on_event = [&](const nlohmann::json& event) {
    const std::string name = event.value("event", "");
    if (name == "worker_channel" && ++hellos == 2) h.rendezvous.change(MembershipChange::kNodeLost);
    // Its collective failed it before the round came: local rank 1 dies.
    if (name == "recovery_started") asio::post(h.io, [&] { h.spawner.exit(1, ExitStatus{1, 0}); });
  };
  CHECK(h.run() == 0);
  REQUIRE(h.spawner.workers.size() == 3);
  CHECK(h.spawner.env(2, "LOCAL_RANK") == "1");
  CHECK(h.spawner.env(2, "TORCHELASTIC_RESTART_COUNT") == "1");
  CHECK(h.restarts == 0);
  const auto done = workers.events("in_place_recovery");
  REQUIRE(done.size() == 1);
  CHECK(done[0]["kept"] == 1);
  CHECK(done[0]["restarted"] == 1);
}

TEST_CASE("in place: a kept worker that does not answer the round in time is restarted",
          "[agent][recovery]") {
  Harness h(1);
  RecoveringWorkers workers(h);
  workers.answer_round = false;
  h.options.config.recovery_timeout = std::chrono::milliseconds(100);
  workers.on_event = [&](const nlohmann::json& event) {
    if (event.value("event", "") == "worker_channel" && h.rendezvous.calls == 1) {
      h.rendezvous.change(MembershipChange::kNodeWaiting);
    }
  };
  CHECK(h.run() == 0);
  REQUIRE(h.spawner.workers.size() == 2);
  CHECK(h.spawner.workers[0].signals == std::vector<int>{SIGKILL});
  CHECK(h.spawner.env(1, "TORCHELASTIC_RESTART_COUNT") == "1");
  CHECK(workers.events("recovery_timeout").size() == 1);
  CHECK(h.logged("did not build its group of the new round within --recovery_timeout"));
}

TEST_CASE("in place: a worker that never spoke on its channel is restarted for the new round",
          "[agent][recovery]") {
  Harness h(1);
  h.options.config.in_place_recovery = true;
  h.spawner.on_spawn = [&](size_t i) {
    if (i == 0) {
      h.rendezvous.change(MembershipChange::kNodeWaiting);  // before any hello
    } else {
      h.spawner.exit(i, ExitStatus{});
    }
  };
  CHECK(h.run() == 0);
  REQUIRE(h.spawner.workers.size() == 2);
  CHECK(h.spawner.workers[0].signals == std::vector<int>{SIGKILL});
  CHECK(h.logged("never spoke on its recovery channel"));
}

TEST_CASE("in place: a signal while the group re-forms stops the kept workers and exits 128+N",
          "[agent][recovery]") {
  Harness h(2);
  RecoveringWorkers workers(h);
  int hellos = 0;
  h.rendezvous.on_call = [&] {
    if (h.rendezvous.calls == 2) h.rendezvous.block_until_shutdown = true;
  };
  workers.on_event = [&](const nlohmann::json& event) {
    const std::string name = event.value("event", "");
    if (name == "worker_channel" && ++hellos == 2) h.rendezvous.change(MembershipChange::kNodeLost);
    if (name == "recovery_started") asio::post(h.io, [&] { h.agent_ptr->handle_signal(SIGTERM); });
  };
  CHECK(h.run() == 128 + SIGTERM);
  REQUIRE(h.spawner.workers.size() == 2);
  for (const auto& worker : h.spawner.workers) {
    CHECK(worker.exited);
    REQUIRE_FALSE(worker.signals.empty());
    CHECK(worker.signals.front() == SIGTERM);
  }
}

TEST_CASE("in place: without the flag a lost node still restarts every worker",
          "[agent][recovery]") {
  Harness h(1);
  h.spawner.on_spawn = [&](size_t i) {
    if (i == 0) {
      h.rendezvous.change(MembershipChange::kNodeLost);
    } else {
      h.spawner.exit(i, ExitStatus{});
    }
  };
  CHECK(h.run() == 0);
  REQUIRE(h.spawner.workers.size() == 2);
  CHECK(h.spawner.env(0, "DDPLAUNCH_RECOVERY_FD").empty());
  CHECK(h.spawner.workers[0].signals == std::vector<int>{SIGTERM});
}

TEST_CASE("in place: workers that finish while the group re-forms are done, not started again",
          "[agent][recovery]") {
  Harness h(1);
  RecoveringWorkers workers(h);
  workers.on_event = [&](const nlohmann::json& event) {
    const std::string name = event.value("event", "");
    if (name == "worker_channel") h.rendezvous.change(MembershipChange::kNodeWaiting);
    if (name == "recovery_started") asio::post(h.io, [&] { h.spawner.exit(0, ExitStatus{}); });
  };
  CHECK(h.run() == 0);
  CHECK(h.spawner.workers.size() == 1);
  CHECK(h.logged("the workers finished while the group re-formed"));
}

TEST_CASE("in place: a fresh worker that fails too fails the group as before, no endless respawn",
          "[agent][recovery]") {
  Harness h(1, /*max_restarts=*/0);
  RecoveringWorkers workers(h);
  workers.answer_fresh = false;
  workers.on_event = [&](const nlohmann::json& event) {
    const std::string name = event.value("event", "");
    if (name == "worker_channel" && h.rendezvous.calls == 1) {
      h.rendezvous.change(MembershipChange::kNodeLost);
    }
    // The kept worker dies in the re-form; its fresh replacement dies before re-forming.
    if (name == "recovery_started") asio::post(h.io, [&] { h.spawner.exit(0, ExitStatus{3, 0}); });
    if (name == "workers_resumed") asio::post(h.io, [&] { h.spawner.exit(1, ExitStatus{4, 0}); });
  };
  CHECK(h.run() == 4);
  CHECK(h.spawner.workers.size() == 2);
}

TEST_CASE(
    "in place: a kept worker that dies after its round notice fails the attempt into a new "
    "round, not a fresh worker in the same one",
    "[agent][recovery]") {
  // Its peers may already dial the address it published for the round (docs/chaos.md,
  // finding 4): a worker started into that round again could not join them, and 60 s
  // (--recovery_timeout) went by before a new round.
  Harness h(2, /*max_restarts=*/1);
  RecoveringWorkers workers(h);
  workers.silent = {1};  // local rank 1 gets its notice and dies before it re-formed
  h.spawner.on_spawn = [&](size_t i) {
    workers.start(i);
    if (i >= 2) asio::post(h.io, [&h, i] { h.spawner.exit(i, ExitStatus{}); });
  };
  int hellos = 0;
  workers.on_event = [&](const nlohmann::json& event) {
    const std::string name = event.value("event", "");
    if (name == "worker_channel" && ++hellos == 2) h.rendezvous.change(MembershipChange::kNodeLost);
    if (name == "workers_resumed") asio::post(h.io, [&] { h.spawner.exit(1, ExitStatus{3, 0}); });
  };
  CHECK(h.run() == 0);
  // Round 0, the re-form into round 1, then the restart into round 2: both workers fresh.
  CHECK(h.rendezvous.calls == 3);
  CHECK(h.restarts == 1);
  REQUIRE(h.spawner.workers.size() == 4);
  for (size_t i : {2, 3}) CHECK(h.spawner.env(i, "TORCHELASTIC_RESTART_COUNT") == "2");
  CHECK(h.spawner.workers[0].signals == std::vector<int>{SIGTERM});  // stopped for the restart
  REQUIRE(workers.received[1].size() == 2);
  CHECK(workers.received[1][1].type == "round");
  CHECK(workers.events("in_place_recovery").empty());
}

TEST_CASE(
    "in place with a standby: this node's only worker fails, the standby takes its place in a "
    "re-form in place, a restart spent",
    "[agent][recovery][standby]") {
  Harness h(1, /*max_restarts=*/1);
  RecoveringWorkers workers(h);
  fail_once_standby_listens(h, workers, 0);
  CHECK(h.run() == 0);
  // One re-form, no stop: the standby (process 1) finished the job as rank 0.
  CHECK(h.rendezvous.calls == 2);
  CHECK(h.restarts == 1);
  REQUIRE(h.spawner.workers.size() >= 2);
  CHECK(h.spawner.env(1, "DDPLAUNCH_STANDBY") == "1");
  CHECK(h.spawner.env(1, "LOCAL_RANK").empty());
  REQUIRE(!workers.received[1].empty());
  const auto notice = ddp::recovery::RoundNotice::from_message(workers.received[1][0]);
  CHECK(notice.round == 1);
  CHECK(notice.rank == 0);
  CHECK(notice.local_rank == 0);
  CHECK(notice.restart_count == 1);
  const auto promoted = workers.events("standby_promoted");
  REQUIRE(promoted.size() == 1);
  CHECK(promoted[0]["pid"] == h.spawner.workers[1].pid);
  const auto done = workers.events("in_place_recovery");
  REQUIRE(done.size() == 1);
  CHECK(done[0]["reason"] == "worker_failed");
  CHECK(done[0]["kept"] == 0);
  CHECK(done[0]["restarted"] == 1);
  CHECK(done[0]["aborted_ms"] == 0);  // nothing here to abort: that phase is over at once
  const auto restart = workers.events("restart");
  REQUIRE(restart.size() == 1);
  CHECK(restart[0]["in_place"] == true);
  CHECK(restart[0]["failed_rank"] == 0);
  CHECK(restart[0]["exit_code"] == 3);
  for (const auto& stopping : workers.events("stopping")) CHECK(stopping["reason"] != "failure");
  // The standby started in its place was killed when the agent left: nothing outlives it.
  for (size_t i = 2; i < h.spawner.workers.size(); ++i) {
    CHECK((h.spawner.workers[i].released || h.spawner.workers[i].exited));
  }
}

TEST_CASE("in place without a standby: a single worker's failure restarts it as before",
          "[agent][recovery][standby]") {
  Harness h(1, /*max_restarts=*/1);
  RecoveringWorkers workers(h);
  workers.on_event = [&](const nlohmann::json& event) {
    if (event.value("event", "") != "worker_channel") return;
    // The first worker crashes; the one restarted after it finishes.
    const size_t i = h.rendezvous.calls == 1 ? 0 : 1;
    asio::post(h.io, [&h, i] { h.spawner.exit(i, ExitStatus{i == 0 ? 3 : 0, 0}); });
  };
  CHECK(h.run() == 0);
  CHECK(h.restarts == 1);
  REQUIRE(h.spawner.workers.size() == 2);
  CHECK(h.spawner.env(1, "TORCHELASTIC_RESTART_COUNT") == "1");
  CHECK(workers.events("recovery_started").empty());  // a restart, not a re-form
  CHECK(workers.events("standby_start").empty());
}

TEST_CASE(
    "in place with a standby: one of two workers fails, the other is kept, the standby "
    "takes the failed one's place",
    "[agent][recovery][standby]") {
  Harness h(2, /*max_restarts=*/1);
  RecoveringWorkers workers(h);
  fail_once_standby_listens(h, workers, 1);
  CHECK(h.run() == 0);
  CHECK(h.rendezvous.calls == 2);
  CHECK(h.restarts == 1);
  CHECK(h.spawner.workers[0].signals.empty());  // kept: abort, then its round notice
  REQUIRE(workers.received[0].size() == 2);
  CHECK(workers.received[0][0].type == "abort");
  CHECK(workers.received[0][1].integer("round") == 1);
  // Process 2 is the standby: it became local rank 1.
  CHECK(h.spawner.env(2, "DDPLAUNCH_STANDBY") == "1");
  REQUIRE(!workers.received[2].empty());
  const auto notice = ddp::recovery::RoundNotice::from_message(workers.received[2][0]);
  CHECK(notice.local_rank == 1);
  CHECK(notice.rank == 1);
  const auto done = workers.events("in_place_recovery");
  REQUIRE(done.size() == 1);
  CHECK(done[0]["kept"] == 1);
  CHECK(done[0]["restarted"] == 1);
}
