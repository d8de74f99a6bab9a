// Half-open store connections: a peer host that vanishes (its link goes dead, nothing is sent
// back, no FIN, no RST) is noticed by keepalive / TCP_USER_TIMEOUT (common/tcp_liveness.hpp)
// within seconds, on the client's end and on the server's. Server and client live in two
// network namespaces joined by a veth pair; taking one end of the pair down makes every
// packet to that side vanish, as when a host powers off or a cable is cut. Needs root (or
// CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2: skipped with a warning otherwise. Timing is
// not asserted tightly: detection takes about 3 s (a 3 s --peer_tolerance), the guard is 10 s, and
// without the options the client would wait out its 30 s timeout and the server would never notice.
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "common/fd.hpp"
#include "tests/store/raw_client.hpp"
#include "tests/support/process.hpp"
#include "tests/support/scoped_env.hpp"
#include "tests/support/wait_until.hpp"

using namespace ddp::rendezvous;
using namespace ddp::test;

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kServerAddr = "10.213.7.1";
constexpr const char* kClientAddr = "10.213.7.2";
// How long a vanished peer may take to be noticed here: ~3 s with the 3 s tolerance set below, plus
// slack for a loaded machine. Without keepalive / TCP_USER_TIMEOUT it would take minutes or
// forever.
constexpr auto kGuard = 10s;

std::string ip_path() {
  for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (::access(path, X_OK) == 0) return path;
  }
  return "";
}

// Two network namespaces, "server" and "client", joined by a veth pair (vs in the server's,
// vc in the client's); both deleted on destruction, whatever the test did.
class NamespacePair {
 public:
  NamespacePair()
      : ip_(ip_path()),
        server_("ddpka" + std::to_string(::getpid()) + "s"),
        client_("ddpka" + std::to_string(::getpid()) + "c") {
    if (ip_.empty()) {
      why_not_ = "no ip (iproute2) binary";
      return;
    }
    remove();  // a leftover of a killed run with the same pid
    const std::vector<std::vector<std::string>> steps = {
        {"netns", "add", server_},
        {"netns", "add", client_},
        {"-n", server_, "link", "add", "vs", "type", "veth", "peer", "name", "vc", "netns",
         client_},
        {"-n", server_, "addr", "add", std::string(kServerAddr) + "/24", "dev", "vs"},
        {"-n", client_, "addr", "add", std::string(kClientAddr) + "/24", "dev", "vc"},
        {"-n", server_, "link", "set", "vs", "up"},
        {"-n", client_, "link", "set", "vc", "up"},
    };
    for (const auto& step : steps) {
      if (auto failed = ip(step)) {
        why_not_ = *failed;
        return;
      }
    }
  }
  ~NamespacePair() { remove(); }
  NamespacePair(const NamespacePair&) = delete;
  NamespacePair& operator=(const NamespacePair&) = delete;

  // Empty when set up; else why not (the skip message).
  [[nodiscard]] const std::string& why_not() const { return why_not_; }
  [[nodiscard]] const std::string& server() const { return server_; }
  [[nodiscard]] const std::string& client() const { return client_; }

  // Takes the server's end of the link down: to the client, the server's host is gone.
  void cut_server() { REQUIRE_FALSE(ip({"-n", server_, "link", "set", "vs", "down"})); }
  // Takes the client's end down: to the server, the client's host is gone.
  void cut_client() { REQUIRE_FALSE(ip({"-n", client_, "link", "set", "vc", "down"})); }

 private:
  // Runs ip with args: nullopt on success, else the command and its output.
  std::optional<std::string> ip(const std::vector<std::string>& args) const {
    std::vector<std::string> argv{ip_};
    argv.insert(argv.end(), args.begin(), args.end());
    const ProcessResult result = run_process(argv, 10s);
    if (result.exit_code == 0) return std::nullopt;
    std::string command;
    for (const auto& a : argv) command += (command.empty() ? "" : " ") + a;
    return command + ": exit " + std::to_string(result.exit_code) + ": " + result.output;
  }
  void remove() const {
    if (ip_.empty()) return;
    // Deleting a namespace takes its end of the veth pair, and with it the other end.
    ip({"netns", "del", server_});
    ip({"netns", "del", client_});
  }

  std::string ip_;
  std::string server_;
  std::string client_;
  std::string why_not_;
};

// Runs fn on a thread that first enters network namespace ns: the sockets fn creates belong
// to ns for good, whichever thread uses them later. fn's exceptions reach the caller.
template <class Fn>
auto in_namespace(const std::string& ns, Fn fn) {
  return std::async(std::launch::async, [ns, fn = std::move(fn)]() mutable {
    const ddp::Fd handle(::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC));
    if (!handle || ::setns(handle.get(), CLONE_NEWNET) != 0) {
      throw std::runtime_error("cannot enter network namespace " + ns + ": " +
                               ddp::errno_text(errno));
    }
    return fn();
  });
}

// A store server listening on kServerAddr inside the server's namespace.
std::unique_ptr<StoreServer> serve_in(const NamespacePair& net) {
  return in_namespace(net.server(),
                      [] {
                        StoreServerOptions options;
                        options.host = kServerAddr;
                        return std::make_unique<StoreServer>(options);
                      })
      .get();
}

TcpStoreOptions dial(uint16_t port) {
  TcpStoreOptions options;
  options.host = kServerAddr;
  options.port = port;
  options.timeout = 30s;
  options.connect_timeout = 5s;
  return options;
}

struct WaitOutcome {
  std::string error;  // what() of what wait threw; "" when it returned
  bool store_timeout = false;
  std::chrono::steady_clock::time_point ended;
};

}  // namespace

TEST_CASE("a client blocked in wait learns within seconds that the store's host vanished",
          "[dead_peer]") {
  const ScopedEnv no_timeout_override(ddp::env::kTcpUserTimeout, nullptr);
  const ScopedEnv no_idle_override(ddp::env::kTcpKeepIdle, nullptr);
  // A 3 s peer tolerance (the default is 15 s): TCP_USER_TIMEOUT 3 s, probes from 1 s idle.
  const ScopedEnv tolerance(ddp::env::kPeerTolerance, "3");
  NamespacePair net;
  if (!net.why_not().empty()) {
    WARN("skipped: cannot set up network namespaces: " << net.why_not());
    return;
  }
  auto server = serve_in(net);
  auto waiting = in_namespace(net.client(), [port = server->port()] {
    TcpStore store(dial(port));
    store.set("here", "1");
    WaitOutcome outcome;
    try {
      store.wait({"never"}, 30s);  // its own connection, idle until the key comes
    } catch (const ddp::StoreTimeout& e) {
      outcome.error = e.what();
      outcome.store_timeout = true;
    } catch (const std::exception& e) {
      outcome.error = e.what();
    }
    outcome.ended = Clock::now();
    return outcome;
  });
  REQUIRE(wait_until([&] { return server->num_connections() == 2; }, 10s));
  // Idle past the detection time with both hosts alive: keepalive probes are answered by the
  // peer's kernel, so nothing is dropped (no false alarm).
  REQUIRE(waiting.wait_for(4s) == std::future_status::timeout);
  CHECK(server->num_connections() == 2);

  const auto cut = Clock::now();
  net.cut_server();
  REQUIRE(waiting.wait_for(kGuard) == std::future_status::ready);
  const WaitOutcome outcome = waiting.get();
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(outcome.ended - cut);
  INFO("wait ended " << took.count() << " ms after the cut: " << outcome.error);
  CHECK_FALSE(outcome.error.empty());
  CHECK_FALSE(outcome.store_timeout);  // a dead connection, not the 30 s deadline
  CHECK_THAT(outcome.error, Catch::Contains("timed out"));
  CHECK(took < kGuard);
}

TEST_CASE("the server drops the connections of a client whose host vanished", "[dead_peer]") {
  const ScopedEnv no_timeout_override(ddp::env::kTcpUserTimeout, nullptr);
  const ScopedEnv no_idle_override(ddp::env::kTcpKeepIdle, nullptr);
  // A 3 s peer tolerance (the default is 15 s): TCP_USER_TIMEOUT 3 s, probes from 1 s idle.
  const ScopedEnv tolerance(ddp::env::kPeerTolerance, "3");
  NamespacePair net;
  if (!net.why_not().empty()) {
    WARN("skipped: cannot set up network namespaces: " << net.why_not());
    return;
  }
  auto server = serve_in(net);
  // The client only connects and goes quiet: its socket stays in its namespace.
  auto store = in_namespace(net.client(), [port = server->port()] {
                 auto s = std::make_unique<TcpStore>(dial(port));
                 s->set("here", "1");
                 return s;
               }).get();
  REQUIRE(wait_until([&] { return server->num_connections() == 1; }, 10s));

  const auto cut = Clock::now();
  net.cut_client();
  const bool dropped = wait_until([&] { return server->num_connections() == 0; }, kGuard);
  const auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - cut).count();
  INFO("server had " << server->num_connections() << " connections " << took
                     << " ms after the cut");
  CHECK(dropped);
}
