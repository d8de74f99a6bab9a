// EtcdStore against real etcd members (tests/support/etcd_cluster.hpp): the Store contract,
// watches woken by other clients, deadlines and unreachable members named in errors, a
// wait that survives the loss of the member it watches through, and adds whose answer was
// lost (tests/support/http_fault_proxy.hpp) applying once.
#include "rendezvous/store/etcd/etcd_store.hpp"

#include <algorithm>
#include <csignal>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "common/log.hpp"
#include "rendezvous/store/etcd/etcd_presence.hpp"
#include "rendezvous/store/prefix_store.hpp"
#include "tests/support/etcd_cluster.hpp"
#include "tests/support/http_fault_proxy.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_certificates.hpp"

using namespace ddp::rendezvous;
using namespace std::chrono_literals;
using ddp::test::EtcdCluster;

namespace {

// One member per test process, started on first use; each store gets a prefix of its own.
EtcdCluster& shared_etcd() {
  static EtcdCluster cluster(1);
  return cluster;
}

EtcdStoreOptions options_for(std::vector<std::string> endpoints, Duration timeout = 2s) {
  static int next = 0;
  EtcdStoreOptions options;
  options.endpoints = std::move(endpoints);
  options.prefix = "/ddp-test/" + std::to_string(++next) + "/";
  options.timeout = timeout;
  options.unreachable_timeout = 5s;
  return options;
}

struct EtcdFixture {
  std::shared_ptr<Store> make() {
    return std::make_shared<EtcdStore>(options_for(shared_etcd().endpoints()));
  }
};
struct PrefixOverEtcdFixture {
  std::shared_ptr<Store> make() {
    return std::make_shared<PrefixStore>("/worker", EtcdFixture().make());
  }
};

}  // namespace

#define STORE_FIXTURES EtcdFixture, PrefixOverEtcdFixture

#include "tests/store/store_contract_cases.hpp"

TEST_CASE("etcd store: a wait is woken by puts from another client", "[etcd]") {
  auto options = options_for(shared_etcd().endpoints(), 20s);
  EtcdStore waiter(options);
  EtcdStore writer(options);
  auto done = std::async(std::launch::async, [&] { waiter.wait({"a", "b"}, 20s); });
  CHECK(done.wait_for(200ms) == std::future_status::timeout);
  writer.set("a", "1");
  CHECK(done.wait_for(200ms) == std::future_status::timeout);  // "b" still missing
  writer.set("b", "2");
  REQUIRE(done.wait_for(5s) == std::future_status::ready);
  done.get();
  CHECK(waiter.multi_get({"a", "b"}) == std::vector<std::string>{"1", "2"});
}

TEST_CASE("etcd store: concurrent adds and appends from many clients lose nothing", "[etcd]") {
  auto options = options_for(shared_etcd().endpoints(), 20s);
  constexpr int kClients = 4;
  constexpr int kEach = 20;
  std::vector<std::future<void>> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.push_back(std::async(std::launch::async, [&options] {
      EtcdStore store(options);
      for (int i = 0; i < kEach; ++i) {
        store.add("counter", 1);
        store.append("log", "x");
      }
    }));
  }
  for (auto& c : clients) c.get();
  EtcdStore store(options);
  CHECK(store.get("counter") == std::to_string(kClients * kEach));
  CHECK(store.get("log") == std::string(kClients * kEach, 'x'));
}

TEST_CASE("etcd store: tickets from many clients are 1..N, each once, with no contention",
          "[etcd]") {
  auto options = options_for(shared_etcd().endpoints(), 20s);
  constexpr int kClients = 8;
  constexpr int kEach = 20;
  std::mutex mu;
  std::vector<int64_t> taken;
  std::vector<std::future<void>> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.push_back(std::async(std::launch::async, [&] {
      EtcdStore store(options);
      PrefixStore round("/r0", std::make_shared<EtcdStore>(options));
      for (int i = 0; i < kEach; ++i) {
        const int64_t t = round.take_ticket("arrived");
        std::lock_guard<std::mutex> lock(mu);
        taken.push_back(t);
      }
    }));
  }
  for (auto& c : clients) c.get();
  std::sort(taken.begin(), taken.end());
  std::vector<int64_t> expected(kClients * kEach);
  std::iota(expected.begin(), expected.end(), 1);
  CHECK(taken == expected);
  PrefixStore round("/r0", std::make_shared<EtcdStore>(options));
  CHECK(round.tickets("arrived") == kClients * kEach);
  CHECK(round.tickets("nothing") == 0);
}

TEST_CASE("etcd store: keys live under the prefix and num_keys counts only those", "[etcd]") {
  auto a = options_for(shared_etcd().endpoints());
  auto b = options_for(shared_etcd().endpoints());
  EtcdStore job_a(a);
  EtcdStore job_b(b);
  job_a.set("k", "a");
  job_a.set("k2", "a");
  job_b.set("k", "b");
  CHECK(job_a.get("k") == "a");
  CHECK(job_b.get("k") == "b");
  CHECK(job_a.num_keys() == 2);
  CHECK(job_b.num_keys() == 1);
  CHECK_THAT(job_a.describe(), Catch::Contains(a.prefix) && Catch::Contains("etcd http://"));
}

TEST_CASE("etcd store: deadlines name the endpoint and the key", "[etcd]") {
  auto& etcd = shared_etcd();
  EtcdStore store(options_for(etcd.endpoints()));
  REQUIRE_THROWS_AS(store.wait({"never"}, 100ms), ddp::StoreTimeout);
  REQUIRE_THROWS_WITH(store.wait({"never"}, 100ms), Catch::Contains(etcd.endpoint(0)) &&
                                                        Catch::Contains("'never'") &&
                                                        Catch::Contains("100 ms"));
  store.set_timeout(100ms);
  REQUIRE_THROWS_WITH(store.get("absent"),
                      Catch::Contains(etcd.endpoint(0)) && Catch::Contains("'absent'"));
  // A member that accepts connections but never answers (stopped): the call's own deadline.
  etcd.signal(0, SIGSTOP);
  std::string message;
  try {
    store.set("frozen", "x");
  } catch (const ddp::StoreTimeout& e) {
    message = e.what();
  }
  etcd.signal(0, SIGCONT);
  CHECK_THAT(message, Catch::Contains(etcd.endpoint(0)) && Catch::Contains("'frozen'"));
  store.set_timeout(5s);
  store.set("after", "ok");  // usable again
  CHECK(store.get("after") == "ok");
}

TEST_CASE("etcd store: with no member up the error names every endpoint tried", "[etcd]") {
  const std::vector<std::string> endpoints = {
      "127.0.0.1:" + std::to_string(ddp::test::free_loopback_port()),
      "127.0.0.1:" + std::to_string(ddp::test::free_loopback_port())};
  auto options = options_for(endpoints, 30s);
  options.unreachable_timeout = 500ms;
  EtcdStore store(options);
  const auto start = std::chrono::steady_clock::now();
  try {
    store.set("k", "v");
    FAIL("set succeeded with no etcd up");
  } catch (const ddp::StoreError& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Catch::Contains("http://" + endpoints[0]) &&
                            Catch::Contains("http://" + endpoints[1]) && Catch::Contains("'k'") &&
                            Catch::Contains("refused"));
  }
  CHECK(std::chrono::steady_clock::now() - start < 5s);  // unreachable_timeout, not timeout
  CHECK_THROWS_WITH(store.wait({"w"}, 10s), Catch::Contains("http://" + endpoints[1]));
}

TEST_CASE("etcd store: a host name that does not resolve is an error within the deadline",
          "[etcd]") {
  auto options = options_for({"no-such-host.invalid:2379"}, 2s);
  options.unreachable_timeout = 500ms;
  EtcdStore store(options);
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(store.set("k", "v"), Catch::Contains("no-such-host.invalid") &&
                                             Catch::Contains("resolving the host"));
  CHECK(std::chrono::steady_clock::now() - start < 5s);
}

TEST_CASE("etcd store: a wait survives the loss of the member it watches through", "[etcd]") {
  std::mutex mu;
  std::string warnings;
  ddp::log::ScopedSink sink([&](ddp::log::Level, std::string_view line) {
    const std::lock_guard<std::mutex> lock(mu);
    warnings.append(line).append("\n");
  });
  EtcdCluster cluster(3);
  auto options = options_for(cluster.endpoints(), 30s);
  EtcdStore waiter(options);  // uses member 0 first
  options.endpoints = {cluster.endpoint(1), cluster.endpoint(2)};
  EtcdStore writer(options);
  writer.set("early", "1");
  auto done = std::async(std::launch::async, [&] {
    waiter.wait({"early", "late"}, 30s);
    return waiter.get("late");
  });
  CHECK(done.wait_for(300ms) == std::future_status::timeout);
  cluster.kill(0);
  writer.set("late", "2");  // likely before the waiter is back: replayed from its revision
  REQUIRE(done.wait_for(20s) == std::future_status::ready);
  CHECK(done.get() == "2");
  CHECK(waiter.add("n", 1) == 1);  // later calls go to the members still up
  const std::lock_guard<std::mutex> lock(mu);
  CHECK_THAT(warnings, Catch::Contains(cluster.endpoint(0) + ": watch lost") &&
                           Catch::Contains("resuming from revision"));
}

TEST_CASE("etcd store: a member that stops answering is left for the next one", "[etcd]") {
  EtcdCluster cluster(3);
  auto options = options_for(cluster.endpoints(), 20s);
  options.attempt_timeout = 1s;
  EtcdStore waiter(options);  // both use member 0 first
  EtcdStore store(options);
  options.endpoints = {cluster.endpoint(1), cluster.endpoint(2)};
  EtcdStore writer(options);
  writer.set("early", "1");
  REQUIRE(waiter.check({"early"}));
  auto done = std::async(std::launch::async, [&] {
    waiter.wait({"late"}, 20s);
    return waiter.get("late");
  });
  CHECK(done.wait_for(300ms) == std::future_status::timeout);
  cluster.signal(0, SIGSTOP);  // accepts connections, answers nothing
  const auto start = std::chrono::steady_clock::now();
  store.set("k", "v");  // one attempt_timeout on member 0, then member 1
  CHECK(store.get("k") == "v");
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  writer.set("late", "2");
  REQUIRE(done.wait_for(15s) == std::future_status::ready);
  CHECK(done.get() == "2");
  cluster.signal(0, SIGCONT);
}

// A transaction that is not idempotent (add, append, compare_set's "" case) whose answer
// never came: HttpFaultProxy stands in front of the member as the first endpoint and breaks
// it; the member itself is the second, so the client fails over to the same etcd. Each
// must apply exactly once (docs/etcd.md, "A member lost mid-request").
namespace {

using ddp::test::HttpFaultProxy;
using Fault = HttpFaultProxy::Fault;

// Breaks the next transaction with a failure branch (the add/append one) in the given way.
HttpFaultProxy::Rule txn_fault(Fault fault, std::function<void()> on_fault = {}) {
  HttpFaultProxy::Rule rule;
  rule.target = "/v3/kv/txn";
  rule.body_contains = "\"failure\"";
  rule.fault = fault;
  rule.on_fault = std::move(on_fault);
  return rule;
}

// Stores of one prefix: `faulty` reaches etcd through the proxy first; `direct` does not.
struct ThroughProxy {
  HttpFaultProxy proxy{"127.0.0.1", shared_etcd().client_port(0)};
  EtcdStoreOptions options = options_for({proxy.endpoint(), shared_etcd().endpoint(0)}, 10s);
  EtcdStore direct{[this] {
    auto o = options;
    o.endpoints = {shared_etcd().endpoint(0)};
    return o;
  }()};
};

// How many keys etcd holds under prefix (markers included), read past any store.
int64_t keys_under(const std::string& prefix) {
  EtcdClientOptions client_options;
  client_options.endpoints = shared_etcd().endpoints();
  EtcdClient client(client_options);
  const auto reply = client.call("/v3/kv/range",
                                 {{"key", base64_encode(prefix)},
                                  {"range_end", base64_encode(prefix_range_end(prefix))},
                                  {"count_only", true}},
                                 ddp::Deadline::after(10s), "test", true);
  return json_int(reply, "count");
}

}  // namespace

TEST_CASE("etcd store: an add whose answer is lost after etcd applied it counts once", "[etcd]") {
  ThroughProxy t;
  t.direct.set("counter", "5");
  for (const Fault fault :
       {Fault::kDropAfterReply, Fault::kHoldAfterReply, Fault::kUnavailableAfterReply}) {
    CAPTURE(static_cast<int>(fault));
    auto options = t.options;
    options.attempt_timeout = 1s;  // kHoldAfterReply: the client gives up on the proxy
    EtcdStore store(options);
    const int64_t before = std::stoll(t.direct.get("counter"));
    t.proxy.arm(txn_fault(fault));
    CHECK(store.add("counter", 1) == before + 1);
    CHECK(t.proxy.faults() == 1);
    CHECK(t.direct.get("counter") == std::to_string(before + 1));
  }
  // A missing key: the transaction's compare is "not created yet".
  {
    EtcdStore store(t.options);
    t.proxy.arm(txn_fault(Fault::kDropAfterReply));
    CHECK(store.add("fresh", 3) == 3);
    CHECK(t.proxy.faults() == 1);
    CHECK(t.direct.get("fresh") == "3");
  }
  // The markers are not keys of the store, and go with it.
  CHECK(t.direct.num_keys() == 2);
  CHECK(keys_under("/ddp-marker" + t.options.prefix) == 0);
}

TEST_CASE("etcd store: a lost add and another client's add in between both count once", "[etcd]") {
  ThroughProxy t;
  t.direct.set("counter", "5");
  EtcdStore store(t.options);
  // Applied, then the other client adds 10 before the answer would have come: the resent
  // transaction's compare fails, and its marker says the first one applied.
  t.proxy.arm(txn_fault(Fault::kDropAfterReply, [&] { t.direct.add("counter", 10); }));
  CHECK(store.add("counter", 1) == 6);
  CHECK(t.direct.get("counter") == "16");
  // Never forwarded, and the other client adds 10 meanwhile: an ordinary conflict.
  EtcdStore second(t.options);
  t.proxy.arm(txn_fault(Fault::kDropBeforeForward, [&] { t.direct.add("counter", 10); }));
  CHECK(second.add("counter", 1) == 27);
  CHECK(t.proxy.faults() == 1);
  CHECK(t.direct.get("counter") == "27");
}

TEST_CASE("etcd store: a lost append and compare_set apply once", "[etcd]") {
  ThroughProxy t;
  t.direct.set("log", "ab");
  {
    EtcdStore store(t.options);
    t.proxy.arm(txn_fault(Fault::kDropAfterReply, [&] { t.direct.append("log", "-"); }));
    store.append("log", "c");
    CHECK(t.proxy.faults() == 1);
    CHECK(t.direct.get("log") == "abc-");
  }
  // compare_set of a key holding "" with expected "": its own transaction (passed on), then
  // one on the key's mod revision (broken).
  t.direct.set("empty", "");
  {
    EtcdStore store(t.options);
    auto rule = txn_fault(Fault::kDropAfterReply);
    rule.skip = 1;
    t.proxy.arm(rule);
    CHECK(store.compare_set("empty", "", "x") == "x");
    CHECK(t.proxy.faults() == 1);
    CHECK(t.direct.get("empty") == "x");
  }
}

TEST_CASE("etcd store: concurrent adds through a member that loses answers stay distinct",
          "[etcd]") {
  ThroughProxy t;
  auto options = t.options;
  options.endpoints = {t.proxy.endpoint(), t.proxy.endpoint()};  // every send goes through it
  auto rule = txn_fault(Fault::kDropAfterReply);
  rule.every = 3;
  rule.count = 12;
  t.proxy.arm(rule);
  constexpr size_t kStores = 2;
  constexpr size_t kThreads = 2;  // per store: each thread has a marker of its own
  constexpr size_t kEach = 10;
  constexpr size_t kAdds = kStores * kThreads * kEach;
  std::mutex mu;
  std::vector<int64_t> results;
  results.reserve(kAdds);
  std::vector<std::unique_ptr<EtcdStore>> stores;
  stores.reserve(kStores);
  for (size_t s = 0; s < kStores; ++s) stores.push_back(std::make_unique<EtcdStore>(options));
  std::vector<std::future<void>> clients;
  clients.reserve(kStores * kThreads);
  for (size_t c = 0; c < kStores * kThreads; ++c) {
    clients.push_back(std::async(std::launch::async, [&, c] {
      for (size_t i = 0; i < kEach; ++i) {
        const int64_t r = stores[c % kStores]->add("counter", 1);
        const std::lock_guard<std::mutex> lock(mu);
        results.push_back(r);
      }
    }));
  }
  for (auto& c : clients) c.get();
  std::sort(results.begin(), results.end());
  std::vector<int64_t> expected(kAdds);
  std::iota(expected.begin(), expected.end(), 1);
  CHECK(results == expected);
  CHECK(t.proxy.faults() == 12);
  CHECK(t.direct.get("counter") == std::to_string(kAdds));
}

TEST_CASE("etcd store: an add whose outcome is still unknown at the deadline says so", "[etcd]") {
  ThroughProxy t;
  auto options = t.options;
  options.endpoints = {t.proxy.endpoint()};
  options.timeout = 1s;  // attempt_timeout (10 s) never comes
  EtcdStore store(options);
  t.direct.set("counter", "5");
  t.proxy.arm(txn_fault(Fault::kHoldAfterReply));
  CHECK_THROWS_AS(store.add("counter", 1), ddp::StoreTimeout);
  t.proxy.arm(txn_fault(Fault::kHoldAfterReply));
  CHECK_THROWS_WITH(store.add("counter", 1), Catch::Contains(t.proxy.endpoint()) &&
                                                 Catch::Contains("add 'counter'") &&
                                                 Catch::Contains("unknown"));
  CHECK(t.direct.get("counter") == "7");  // both applied, as etcd had them
}

// Presence on leases (docs/etcd.md, "Presence"); store_contract_test.cpp has the same
// orderly case for the other stores.
TEST_CASE("etcd presence: ephemeral keys live with it, and an orderly leave fires nothing",
          "[etcd][presence]") {
  auto options = options_for(shared_etcd().endpoints());
  EtcdStore store(options);
  auto watcher = store.open_presence();  // would fire on_close records
  {
    auto presence = store.open_presence();
    REQUIRE(presence != nullptr);
    presence->set_ephemeral("alive/1", "pid 42");
    presence->on_close("lost", "node 1");
    CHECK(store.get("alive/1") == "pid 42");
    CHECK_FALSE(store.check({"lost"}));
    CHECK(store.num_keys() == 1);  // records live outside the prefix
    presence->clear();
    CHECK_FALSE(store.check({"alive/1"}));
    presence->set_ephemeral("alive/1", "again");
    CHECK(store.check({"alive/1"}));
  }
  CHECK_FALSE(store.check({"alive/1"}));
  std::this_thread::sleep_for(500ms);  // a watcher that would fire has seen the deletions
  CHECK_FALSE(store.check({"lost"}));
}

TEST_CASE("etcd presence: a dead holder's lease expires, its keys go, on_close fires once",
          "[etcd][presence]") {
  auto options = options_for(shared_etcd().endpoints(), 10s);
  options.presence_ttl = 2s;
  EtcdStore survivor_store(options);
  EtcdStore dying_store(options);
  auto survivor = survivor_store.open_presence();
  auto dying = dying_store.open_presence();
  dying->set_ephemeral("alive/1", "pid 42");
  dying->on_close("lost", "node 1");
  survivor_store.set("kept", "first");
  dying->on_close("kept", "overwritten?");
  std::this_thread::sleep_for(3s);  // keepalives hold the lease past its TTL
  CHECK(survivor_store.check({"alive/1"}));
  CHECK_FALSE(survivor_store.check({"lost"}));
  const auto start = std::chrono::steady_clock::now();
  dynamic_cast<EtcdPresence&>(*dying).abandon();  // as if killed: no leave, no keepalive
  CHECK(survivor_store.get("lost") == "node 1");  // waits up to the store's 10 s
  CHECK(std::chrono::steady_clock::now() - start < 8s);
  CHECK_FALSE(survivor_store.check({"alive/1"}));
  CHECK(survivor_store.get("kept") == "first");  // on_close never overwrites
  CHECK_THROWS_AS(dying->set_ephemeral("x", "y"), ddp::StoreError);
}

TEST_CASE("etcd presence: ended from elsewhere by its token, as if its holder had died",
          "[etcd][presence]") {
  // The death witness (worker_store_host.hpp): a node that saw another die ends that node's
  // presence at once instead of waiting out its TTL. Through PrefixStores, as the rendezvous
  // uses them: the token must survive the wrapping.
  auto options = options_for(shared_etcd().endpoints(), 10s);
  options.presence_ttl = 60s;  // only end_presence can explain the keys going
  auto survivor_base = std::make_shared<EtcdStore>(options);
  auto dying_base = std::make_shared<EtcdStore>(options);
  PrefixStore survivor_store("/job", survivor_base);
  PrefixStore dying_store("/job", dying_base);
  auto survivor = survivor_store.open_presence();
  auto dying = dying_store.open_presence();
  dying->set_ephemeral("alive/1", "pid 42");
  dying->on_close("lost", "node 1");
  const std::string token = dying->token();  // etcd's lease id, in decimal
  REQUIRE_FALSE(token.empty());
  CHECK(token.find_first_not_of("0123456789") == std::string::npos);
  survivor_store.end_presence(token);
  CHECK(survivor_store.get("lost") == "node 1");  // the survivor's watcher fired the record
  CHECK_FALSE(survivor_store.check({"alive/1"}));
  CHECK_THROWS_AS(dying->set_ephemeral("x", "y"), ddp::StoreError);
  CHECK_NOTHROW(survivor_store.end_presence(token));  // a second survivor's revoke: no error
  CHECK_THROWS_WITH(survivor_store.end_presence("no-such-lease"), Catch::Contains("no-such-lease"));
}

// EtcdStore::wait answers kCompacted by reading the keys again; no test makes etcd compact
// between that read and the watch, so only the client's side is checked here.
TEST_CASE("etcd client: a watch from a compacted revision says so", "[etcd]") {
  auto options = options_for(shared_etcd().endpoints(), 10s);
  EtcdStore store(options);
  EtcdClientOptions client_options;
  client_options.endpoints = shared_etcd().endpoints();
  EtcdClient client(client_options);
  const auto deadline = ddp::Deadline::after(10s);
  store.set("k", "1");
  store.set("k", "2");
  const auto reply = client.call("/v3/kv/range", {{"key", base64_encode(options.prefix + "k")}},
                                 deadline, "test", true);
  const int64_t now = json_int(reply.at("header"), "revision");
  client.call("/v3/kv/compaction", {{"revision", std::to_string(now)}}, deadline, "test", true);
  CHECK(client.watch_for_put(options.prefix + "k", now - 1, deadline, "test") ==
        EtcdClient::WatchResult::kCompacted);
  // From the revision compacted to, history is still there: the last put is replayed.
  CHECK(client.watch_for_put(options.prefix + "k", now, deadline, "test") ==
        EtcdClient::WatchResult::kMatched);
}

TEST_CASE("etcd store: reads of more keys than one transaction takes", "[etcd]") {
  EtcdStore store(options_for(shared_etcd().endpoints()));
  std::vector<std::string> keys;
  std::vector<std::string> values;
  for (int i = 0; i < 200; ++i) {
    keys.push_back("k" + std::to_string(i));
    values.push_back("v" + std::to_string(i));
  }
  CHECK_THROWS_WITH(store.multi_set(keys, values), Catch::Contains("--max-txn-ops"));
  const std::vector<std::string> first(keys.begin(), keys.begin() + 100);
  const std::vector<std::string> rest(keys.begin() + 100, keys.end());
  store.multi_set(first, std::vector<std::string>(values.begin(), values.begin() + 100));
  CHECK_FALSE(store.check(keys));
  store.multi_set(rest, std::vector<std::string>(values.begin() + 100, values.end()));
  CHECK(store.check(keys));  // 128 + 72, the second read pinned to the first's revision
  CHECK(store.multi_get(keys) == values);
  CHECK(store.num_keys() == 200);
}

TEST_CASE("etcd store: a cluster with auth enabled takes a user and password", "[etcd]") {
  EtcdCluster etcd(1);
  const std::string etcdctl = "/usr/bin/etcdctl";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"user", "add", "root:secret"},
        std::vector<std::string>{"auth", "enable"}}) {
    std::vector<std::string> argv = {etcdctl, "--endpoints=http://" + etcd.endpoint(0)};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto result = ddp::test::run_process(argv, 30s);
    REQUIRE(result.exit_code == 0);
  }
  auto options = options_for(etcd.endpoints(), 5s);
  options.unreachable_timeout = 1s;
  {
    EtcdStore anonymous(options);
    CHECK_THROWS_WITH(anonymous.set("k", "v"), Catch::Contains(etcd.endpoint(0)) &&
                                                   Catch::Contains("'k'") &&
                                                   Catch::Contains("user name is empty"));
  }
  options.username = "root";
  options.password = "wrong";
  {
    EtcdStore wrong(options);
    CHECK_THROWS_WITH(wrong.set("k", "v"), Catch::Contains("authenticating as 'root'") &&
                                               Catch::Contains("authentication failed"));
  }
  options.password = "secret";
  EtcdStore waiter(options);
  EtcdStore writer(options);
  auto done = std::async(std::launch::async, [&] { return waiter.get("later"); });
  CHECK(done.wait_for(200ms) == std::future_status::timeout);
  writer.set("later", "v");
  REQUIRE(done.wait_for(5s) == std::future_status::ready);
  CHECK(done.get() == "v");
  CHECK(writer.add("n", 2) == 2);
}

TEST_CASE("etcd store: https to members that ask for a client certificate", "[etcd]") {
  const ddp::test::TestCertificates certs;
  ddp::test::EtcdTls tls;
  tls.cert_file = certs.dir.file("server.crt");
  tls.key_file = certs.dir.file("server.key");
  tls.client_ca_file = certs.ca();
  EtcdCluster etcd(1, 30s, tls);
  auto options = options_for({"https://" + etcd.endpoint(0)}, 5s);
  options.unreachable_timeout = 1s;
  options.tls.ca_file = certs.ca();
  options.tls.cert_file = certs.dir.file("client.crt");
  options.tls.key_file = certs.dir.file("client.key");
  EtcdStore waiter(options);
  EtcdStore writer(options);
  auto done = std::async(std::launch::async, [&] { return waiter.get("later"); });
  CHECK(done.wait_for(200ms) == std::future_status::timeout);
  writer.set("later", "v");
  REQUIRE(done.wait_for(5s) == std::future_status::ready);
  CHECK(done.get() == "v");
  CHECK(writer.add("n", 2) == 2);
  CHECK_THAT(writer.describe(), Catch::Contains("https://" + etcd.endpoint(0)));

  auto no_client_cert = options;  // the member refuses the handshake
  no_client_cert.tls.cert_file.clear();
  no_client_cert.tls.key_file.clear();
  CHECK_THROWS_WITH(EtcdStore(no_client_cert).set("k", "v"),
                    Catch::Contains("https://" + etcd.endpoint(0)) && Catch::Contains("'k'"));
  auto system_cas = options;  // our test CA is not among them: the member is not trusted
  system_cas.tls.ca_file.clear();
  CHECK_THROWS_WITH(EtcdStore(system_cas).set("k", "v"),
                    Catch::Contains("TLS handshake") && Catch::Contains("certificate verify"));
  auto bad_file = options;
  bad_file.tls.ca_file = certs.dir.file("missing.crt");
  CHECK_THROWS_WITH(EtcdStore(bad_file), Catch::Contains("missing.crt"));
}
