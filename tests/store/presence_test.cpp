// Presence: records tied to one connection's life (ddplaunch's own dialect). What a user
// notices: when an agent dies, whoever waits for its on_close key wakes at once, and its
// ephemeral keys are gone; an orderly leave changes nothing for the others; a PyTorch client
// never sees any of it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "common/error.hpp"
#include "common/socket_io.hpp"
#include "rendezvous/store/memory_store.hpp"
#include "rendezvous/store/prefix_store.hpp"
#include "rendezvous/store/server/store_server.hpp"
#include "rendezvous/store/tcp_store.hpp"
#include "rendezvous/store/wire_codec.hpp"
#include "tests/store/raw_client.hpp"

using namespace ddp::rendezvous;
using namespace std::chrono_literals;
using ddp::test::Raw;
using ddp::test::req;
using Clock = std::chrono::steady_clock;

namespace {

TcpStoreOptions options(uint16_t port) {
  TcpStoreOptions o;
  o.port = port;
  o.timeout = 5s;
  o.connect_timeout = 5s;
  return o;
}

// A raw client that negotiated the extension.
Raw native_client(uint16_t port) {
  Raw raw(port);
  raw.send(req(wire::Command::kCheck, {wire::kExtensionProbeKey}));
  REQUIRE(raw.recv_u8() == wire::kCheckReady);
  return raw;
}

}  // namespace

TEST_CASE("presence: a severed memory presence deletes its keys, then sets on_close keys",
          "[store][presence]") {
  auto store = std::make_shared<MemoryStore>(2s);
  PrefixStore view("/job", store);
  auto a = view.open_presence();
  auto b = view.open_presence();
  a->set_ephemeral("alive/a", "1");
  a->on_close("failure", "a died");
  b->set_ephemeral("alive/b", "1");
  b->on_close("failure", "b died");
  view.set("taken", "first");
  a->on_close("taken", "a");  // exists at close: left as it is

  auto woken = std::async(std::launch::async, [&] {
    view.wait({"failure"}, 5s);
    return std::make_pair(view.get("failure"), view.check({"alive/a"}));
  });
  REQUIRE(store->sever_presence_holding("/job/alive/a"));
  const auto [failure, a_still_there] = woken.get();
  CHECK(failure == "a died");
  CHECK_FALSE(a_still_there);
  CHECK(view.get("taken") == "first");
  CHECK(view.check({"alive/b"}));
  CHECK_THROWS_AS(a->set_ephemeral("x", "1"), ddp::StoreError);
  b.reset();  // b leaves in order: its on_close does not overwrite the first record
  CHECK(view.get("failure") == "a died");
  CHECK_FALSE(view.check({"alive/b"}));
  CHECK_FALSE(store->sever_presence_holding("/job/alive/b"));
}

TEST_CASE("presence: a dropped connection wakes a blocked waiter at once (real server)",
          "[store][presence]") {
  StoreServer server(ddp::test::loopback());
  auto store = std::make_shared<TcpStore>(options(server.port()));
  {
    Raw raw = native_client(server.port());
    raw.send(req(wire::Command::kEphemeral, {"alive/1"}, {"x"}), wire::Dialect::kNative);
    CHECK(raw.recv_u8() == wire::kCloseActionDone);
    raw.send(req(wire::Command::kOnClose, {"lost"}, {"node 1"}), wire::Dialect::kNative);
    CHECK(raw.recv_u8() == wire::kCloseActionDone);
    CHECK(store->check({"alive/1"}));
    auto waiter = std::async(std::launch::async, [&] {
      const auto started = Clock::now();
      store->wait({"lost"}, 5s);
      return Clock::now() - started;
    });
    std::this_thread::sleep_for(50ms);
    raw.conn.close();  // the kernel closes a killed process' sockets the same way
    const auto waited = waiter.get();
    CHECK(waited < 5s);  // woken by the close, not by the timeout
  }
  CHECK(store->get("lost") == "node 1");
  CHECK_FALSE(store->check({"alive/1"}));
}

TEST_CASE("presence: a TCP store presence has no token, and ending one from elsewhere is refused",
          "[store][presence]") {
  // Its connection is what ends it: no other process can (only etcd's leases can be revoked).
  StoreServer server(ddp::test::loopback());
  auto base = std::make_shared<TcpStore>(options(server.port()));
  PrefixStore store("/job", base);
  auto presence = store.open_presence();
  REQUIRE(presence != nullptr);
  CHECK(presence->token().empty());
  CHECK_THROWS_AS(store.end_presence("42"), ddp::StoreError);
  CHECK_THROWS_WITH(store.end_presence("42"), Catch::Contains("'42'"));
}

TEST_CASE("presence: a SIGKILLed process holding a TcpStore presence is seen gone",
          "[store][presence]") {
  StoreServer server(ddp::test::loopback());
  const uint16_t port = server.port();
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    try {
      TcpStore s(options(port));
      auto presence = s.open_presence();
      presence->on_close("failure/0", "node 1 lost");
      presence->set_ephemeral("alive/1", "here");
      ::pause();
    } catch (...) {
    }
    ::_exit(3);
  }
  TcpStore store(options(port));
  store.wait({"alive/1"}, 5s);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  store.wait({"failure/0"}, 5s);
  CHECK(store.get("failure/0") == "node 1 lost");
  CHECK_FALSE(store.check({"alive/1"}));
}

TEST_CASE("presence: without the probe the extension does not exist", "[store][presence]") {
  StoreServer server(ddp::test::loopback());
  SECTION("a 2.x client sending ON_CLOSE is closed as for any unknown command") {
    Raw raw(server.port());
    raw.send(
        wire::encode_request(req(wire::Command::kOnClose, {"k"}, {"v"}), wire::Dialect::kNative));
    CHECK(raw.closed_by_server());
  }
  SECTION("a legacy (PyTorch 1.x) client asking for the probe key hears 'not ready'") {
    Raw raw(server.port(), /*v2=*/false);
    raw.send(req(wire::Command::kCheck, {wire::kExtensionProbeKey}), wire::Dialect::kLegacy);
    CHECK(raw.recv_u8() == wire::kCheckNotReady);
  }
}

TEST_CASE("presence: one connection holds at most kMaxCloseActions records", "[store][presence]") {
  StoreServer server(ddp::test::loopback());
  Raw raw = native_client(server.port());
  for (size_t i = 0; i < wire::kMaxCloseActions; ++i) {
    raw.send(req(wire::Command::kOnClose, {"k" + std::to_string(i)}, {"v"}),
             wire::Dialect::kNative);
    REQUIRE(raw.recv_u8() == wire::kCloseActionDone);
  }
  raw.send(req(wire::Command::kOnClose, {"one too many"}, {"v"}), wire::Dialect::kNative);
  CHECK(raw.closed_by_server());
  // The refused connection still counts as dropped: its records ran.
  auto store = ddp::test::client(server.port(), 2s);
  store.wait({"k0", "k63"}, 2s);
  CHECK_FALSE(store.check({"one too many"}));
}

TEST_CASE("presence: a store server without the extension gives nullptr, not an error",
          "[store][presence]") {
  // Stands in for a PyTorch 2.x TCPStore: it knows no probe key, so CHECK says "not ready".
  const int listen_fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(listen_fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listen_fd, 4) == 0);
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const uint16_t port = ntohs(addr.sin_port);
  std::thread server([listen_fd] {
    // Every TcpStore connection (the store's own, then the presence one) sends VALIDATE and
    // the probe's CHECK at connect; both are told "not ready".
    auto answer_probe = [](int conn) {
      const size_t frame = 5 + 1 + 8 + 8 + wire::kExtensionProbeKey.size();
      std::string in(frame, '\0');
      size_t got = 0;
      while (got < frame) {
        const ssize_t n = ::read(conn, in.data() + got, frame - got);
        if (n <= 0) break;
        got += static_cast<size_t>(n);
      }
      const char not_ready = static_cast<char>(wire::kCheckNotReady);
      (void)::write(conn, &not_ready, 1);
    };
    const int main_conn = ::accept(listen_fd, nullptr, nullptr);  // the store's own
    answer_probe(main_conn);
    const int probe_conn = ::accept(listen_fd, nullptr, nullptr);
    answer_probe(probe_conn);
    char byte = 0;
    (void)::read(probe_conn, &byte, 1);  // until the client hangs up
    ::close(probe_conn);
    ::close(main_conn);
  });
  {
    TcpStore store(options(port));
    CHECK(store.open_presence() == nullptr);
  }
  server.join();
  ::close(listen_fd);
}
