// Which I/O backend a StoreServer serves with (epoll or io_uring), how it is chosen, and a
// burst of clients that every backend must answer in full. test_store_io runs once; every
// other store test binary runs once per backend (tests/CMakeLists.txt, IO_BACKENDS).
#include <catch2/catch.hpp>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "rendezvous/store/server/fd_limit.hpp"
#include "tests/store/raw_client.hpp"

using namespace ddp::rendezvous;
using namespace ddp::test;

namespace {

// Sets (or with nullopt unsets) DDPLAUNCH_STORE_IO for a scope, restoring it afterwards.
class StoreIoEnv {
 public:
  explicit StoreIoEnv(const std::optional<std::string>& value) {
    if (const char* old = std::getenv(kName)) saved_ = old;
    if (value) {
      ::setenv(kName, value->c_str(), 1);
    } else {
      ::unsetenv(kName);
    }
  }
  ~StoreIoEnv() {
    if (saved_) {
      ::setenv(kName, saved_->c_str(), 1);
    } else {
      ::unsetenv(kName);
    }
  }
  StoreIoEnv(const StoreIoEnv&) = delete;
  StoreIoEnv& operator=(const StoreIoEnv&) = delete;

 private:
  static constexpr const char* kName = "DDPLAUNCH_STORE_IO";
  std::optional<std::string> saved_;
};

StoreServerOptions with_io(StoreIo io) {
  StoreServerOptions o = loopback();
  o.io = io;
  return o;
}

// A round trip through the server, so a backend is known to serve, not only to start.
void check_serves(const StoreServer& server) {
  auto store = client(server.port());
  store.set("k", "v");
  CHECK(store.get("k") == "v");
}

}  // namespace

TEST_CASE("parse_store_io knows auto, epoll and io_uring only", "[io]") {
  CHECK(parse_store_io("auto") == StoreIo::kAuto);
  CHECK(parse_store_io("epoll") == StoreIo::kEpoll);
  CHECK(parse_store_io("io_uring") == StoreIo::kIoUring);
  CHECK_FALSE(parse_store_io("uring").has_value());
  CHECK_FALSE(parse_store_io("").has_value());
}

TEST_CASE("epoll serves when asked for", "[io]") {
  const StoreIoEnv env(std::nullopt);
  StoreServer server(with_io(StoreIo::kEpoll));
  CHECK(server.io_backend() == "epoll");
  check_serves(server);
}

TEST_CASE("auto serves with io_uring where the kernel offers it, and says why not elsewhere",
          "[io]") {
  const StoreIoEnv env(std::nullopt);
  std::optional<StoreServer> uring;
  std::string refusal;
  try {
    uring.emplace(with_io(StoreIo::kIoUring));
  } catch (const ddp::StoreError& e) {
    refusal = e.what();
  }
  StoreServer automatic(loopback());
  if (uring) {
    CHECK(uring->io_backend() == "io_uring");
    check_serves(*uring);
    CHECK(automatic.io_backend() == "io_uring");
  } else {
    INFO("io_uring refused: " << refusal);
    CHECK_THAT(refusal, Catch::Contains("io_uring was asked for but is unavailable"));
    CHECK_THAT(automatic.io_backend(), Catch::StartsWith("epoll (io_uring unavailable: "));
  }
  check_serves(automatic);
}

TEST_CASE("DDPLAUNCH_STORE_IO chooses for auto, an explicit option wins, a bad value is named",
          "[io]") {
  {
    const StoreIoEnv env(std::string("epoll"));
    StoreServer server(loopback());
    CHECK(server.io_backend() == "epoll");
    check_serves(server);
  }
  {
    const StoreIoEnv env(std::string("io_uring"));
    StoreServer server(with_io(StoreIo::kEpoll));
    CHECK(server.io_backend() == "epoll");
  }
  {
    const StoreIoEnv env(std::string("fast"));
    try {
      StoreServer server(loopback());
      FAIL("a server started with DDPLAUNCH_STORE_IO=fast");
    } catch (const ddp::ConfigError& e) {
      CHECK_THAT(e.what(), Catch::Contains("DDPLAUNCH_STORE_IO='fast'") &&
                               Catch::Contains("expected auto, epoll or io_uring"));
    }
  }
}

TEST_CASE("io_uring_buffers must be a power of two the kernel accepts", "[io]") {
  StoreServerOptions options = loopback();
  for (const unsigned bad : {0U, 1000U, 65536U}) {
    options.io_uring_buffers = bad;
    CHECK_THROWS_WITH(StoreServer(options),
                      Catch::Contains("io_uring_buffers " + std::to_string(bad) +
                                      " is not a power of two from 1 to 32768"));
  }
}

TEST_CASE("a burst of 2048 clients whose requests arrive at once is answered in full",
          "[io][scale]") {
  // Both ends of every connection live in this process: 2 descriptors each.
  const uint64_t limit = raise_fd_limit();
  const size_t clients = 2048;
  REQUIRE(limit >= 2 * clients + 64);
  struct Setup {
    StoreIo io;
    unsigned buffers;
  };
  // With 4 provided buffers io_uring runs out of them in nearly every turn (-ENOBUFS ends the
  // multishot recvs, which must be armed again); where io_uring is unavailable these two
  // runs are epoll's again.
  for (const Setup setup :
       {Setup{StoreIo::kEpoll, 1024}, Setup{StoreIo::kAuto, 1024}, Setup{StoreIo::kAuto, 4}}) {
    const StoreIoEnv env(std::nullopt);
    StoreServerOptions options = with_io(setup.io);
    options.io_uring_buffers = setup.buffers;
    options.limits.max_conns_per_peer = clients;  // all from 127.0.0.1: past the default 1024
    StoreServer server(options);
    INFO("backend " << server.io_backend() << ", " << setup.buffers << " buffers");
    std::vector<Raw> conns;
    conns.reserve(clients);
    for (size_t i = 0; i < clients; ++i) conns.emplace_back(server.port());
    // Every request is sent before any reply is read.
    wire::Request add = req(wire::Command::kAdd, {"n"});
    add.delta = 1;
    for (auto& c : conns) c.send(add);
    std::set<int64_t> counts;
    for (auto& c : conns) counts.insert(c.recv_i64());
    CHECK(counts.size() == clients);
    CHECK(*counts.begin() == 1);
    CHECK(*counts.rbegin() == static_cast<int64_t>(clients));
    CHECK(server.num_connections() == clients);
  }
}
