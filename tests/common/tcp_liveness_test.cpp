// common/tcp_liveness: the options a TCP socket gets (read back with getsockopt), sockets that
// are not TCP left alone, the DDPLAUNCH_TCP_* overrides and their errors.
#include "common/tcp_liveness.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <set>

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "common/fd.hpp"
#include "common/socket_io.hpp"
#include "tests/support/scoped_env.hpp"
#include "tests/support/tcp_sockets.hpp"

using Catch::Contains;
using ddp::Fd;
using ddp::SocketConn;
using ddp::TcpLiveness;
using ddp::test::ScopedEnv;
using ddp::test::tcp_socket_info;
using namespace std::chrono_literals;

namespace {

// Both ends of a loopback TCP connection.
struct TcpPair {
  TcpPair() {
    Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    REQUIRE(listener);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), length) == 0);
    REQUIRE(::listen(listener.get(), 1) == 0);
    REQUIRE(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &length) == 0);
    client = SocketConn::connect("127.0.0.1", ntohs(address.sin_port), 5s);
    server.reset(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    REQUIRE(server);
  }
  SocketConn client;
  Fd server;
};

// Every DDPLAUNCH_TCP_* unset for the scope, so the machine's environment cannot leak in.
struct NoOverrides {
  ScopedEnv idle{ddp::env::kTcpKeepIdle, nullptr};
  ScopedEnv interval{ddp::env::kTcpKeepIntvl, nullptr};
  ScopedEnv count{ddp::env::kTcpKeepCnt, nullptr};
  ScopedEnv user_timeout{ddp::env::kTcpUserTimeout, nullptr};
  ScopedEnv rto_max{ddp::env::kTcpRtoMax, nullptr};
  ScopedEnv tolerance{ddp::env::kPeerTolerance, nullptr};
};

}  // namespace

TEST_CASE("a TCP socket gets keepalive and TCP_USER_TIMEOUT, read back", "[tcp_liveness]") {
  TcpPair pair;
  // Before: the kernel's defaults (no keepalive), so the checks below can fail.
  REQUIRE_FALSE(tcp_socket_info(pair.client.fd()).keepalive);

  SECTION("defaults: probes from 1 s idle, 1 s apart, 2 of them; 3000 ms user timeout") {
    for (const int fd : {pair.client.fd(), pair.server.get()}) {
      CHECK(ddp::set_tcp_liveness(fd, TcpLiveness{}));
      const auto info = tcp_socket_info(fd);
      CHECK(info.keepalive);
      CHECK(info.keepidle_s == 1);
      CHECK(info.keepintvl_s == 1);
      CHECK(info.keepcnt == 2);
      CHECK(info.user_timeout_ms == 3000);
    }
  }
  SECTION("other values, and a user timeout of 0 (the kernel's default)") {
    const TcpLiveness liveness{
        .keepidle_s = 30, .keepintvl_s = 5, .keepcnt = 4, .user_timeout_ms = 0};
    CHECK(ddp::set_tcp_liveness(pair.client.fd(), liveness));
    const auto info = tcp_socket_info(pair.client.fd());
    CHECK(info.keepalive);
    CHECK(info.keepidle_s == 30);
    CHECK(info.keepintvl_s == 5);
    CHECK(info.keepcnt == 4);
    CHECK(info.user_timeout_ms == 0);
  }
  SECTION("a value the kernel refuses is a SocketError naming the option and value") {
    const TcpLiveness liveness{.keepcnt = 1000};
    CHECK_THROWS_WITH(ddp::set_tcp_liveness(pair.client.fd(), liveness),
                      Contains("TCP_KEEPCNT=1000") && Contains("Invalid argument"));
  }
  SECTION("resends capped at once a second where the kernel can (Linux 6.15 on)") {
    TcpLiveness liveness;
    liveness.rto_max_ms = 1000;
    liveness.user_timeout_uncapped_ms = 9000;
    REQUIRE(ddp::set_tcp_liveness(pair.client.fd(), liveness));
    const auto info = tcp_socket_info(pair.client.fd());
    if (info.rto_max_ms < 0) {
      // No TCP_RTO_MAX_MS here: the longer user timeout rides out a silence instead.
      CHECK(info.user_timeout_ms == 9000);
    } else {
      CHECK(info.rto_max_ms == 1000);
      CHECK(info.user_timeout_ms == 3000);
    }
  }
  SECTION("the connection still carries bytes") {
    REQUIRE(ddp::set_tcp_liveness(pair.client.fd(), TcpLiveness{}));
    pair.client.send_all("ping", ddp::Deadline::after(5s));
    char buffer[4] = {};
    CHECK(::recv(pair.server.get(), buffer, sizeof(buffer), MSG_WAITALL) == 4);
  }
}

TEST_CASE("sockets that are not TCP are left alone", "[tcp_liveness]") {
  int ends[2] = {-1, -1};
  SECTION("a Unix socket pair") {
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) == 0);
  }
  SECTION("a pipe") {
    REQUIRE(::pipe2(ends, O_CLOEXEC) == 0);
  }
  const Fd first(ends[0]);
  const Fd second(ends[1]);
  CHECK_FALSE(ddp::set_tcp_liveness(first.get(), TcpLiveness{}));
  CHECK_FALSE(ddp::set_tcp_liveness(-1, TcpLiveness{}));
}

TEST_CASE("the DDPLAUNCH_TCP_ variables override the defaults", "[tcp_liveness][env]") {
  const NoOverrides clean;
  SECTION("unset or empty: the default peer tolerance's timing (15 s)") {
    const ScopedEnv empty(ddp::env::kTcpUserTimeout, "");
    const TcpLiveness liveness = ddp::tcp_liveness_from_env();
    CHECK(liveness.keepintvl_s == 1);
    CHECK(liveness.keepidle_s >= 1);  // 2 s, jittered down to 1 s
    CHECK(liveness.keepidle_s <= 2);
    // Counted from the last packet received, up to keepidle before a silence began, and 2 s
    // for the first packet through after it: no silence shorter than 15 s drops a connection.
    CHECK(liveness.user_timeout_ms == 15000 + (liveness.keepidle_s + 2) * 1000);
    CHECK(liveness.rto_max_ms == 1000);
    CHECK(liveness.user_timeout_uncapped_ms == 30000 + (liveness.keepidle_s + 2) * 1000);
    CHECK(liveness.keepcnt == liveness.user_timeout_ms / 1000 - liveness.keepidle_s);
  }
  SECTION("DDPLAUNCH_PEER_TOLERANCE drives every option; a DDPLAUNCH_TCP_ variable still wins") {
    const ScopedEnv tolerance(ddp::env::kPeerTolerance, "4");
    TcpLiveness liveness = ddp::tcp_liveness_from_env();
    CHECK(liveness.keepidle_s == 1);  // under 6 s: always 1
    CHECK(liveness.user_timeout_ms == 7000);
    CHECK(liveness.user_timeout_uncapped_ms == 11000);
    CHECK(liveness.keepcnt == 6);
    const ScopedEnv user_timeout(ddp::env::kTcpUserTimeout, "3000");
    liveness = ddp::tcp_liveness_from_env();
    CHECK(liveness.user_timeout_ms == 3000);
    CHECK(liveness.user_timeout_uncapped_ms == 3000);  // an explicit timeout is kept either way
    CHECK(liveness.keepidle_s == 1);
  }
  SECTION("keepalive idle times are jittered, so connections made together probe apart") {
    std::set<int> idles;
    for (int i = 0; i < 200; ++i) idles.insert(ddp::tcp_liveness_for(60s).keepidle_s);
    CHECK(idles == std::set<int>{1, 2});
  }
  SECTION("DDPLAUNCH_TCP_RTO_MAX_MS sets the cap on resends; 0 leaves the kernel's") {
    const ScopedEnv cap(ddp::env::kTcpRtoMax, "2500");
    CHECK(ddp::tcp_liveness_from_env().rto_max_ms == 2500);
    const ScopedEnv none(ddp::env::kTcpRtoMax, "0");
    CHECK(ddp::tcp_liveness_from_env().rto_max_ms == 0);
  }
  SECTION("a DDPLAUNCH_TCP_RTO_MAX_MS the kernel cannot take is a ConfigError naming it") {
    const std::string value = GENERATE("500", "120001", "fast");
    const ScopedEnv bad(ddp::env::kTcpRtoMax, value.c_str());
    CHECK_THROWS_AS(ddp::tcp_liveness_from_env(), ddp::ConfigError);
    CHECK_THROWS_WITH(ddp::tcp_liveness_from_env(), Contains("DDPLAUNCH_TCP_RTO_MAX_MS='" + value));
  }
  SECTION("a bad DDPLAUNCH_PEER_TOLERANCE is a ConfigError naming it, its value and the range") {
    const ScopedEnv bad(ddp::env::kPeerTolerance, "0.5");
    CHECK_THROWS_WITH(ddp::tcp_liveness_from_env(),
                      Contains("DDPLAUNCH_PEER_TOLERANCE=0.5") && Contains("from 1 s to 1 day"));
  }
  SECTION("each variable sets its option") {
    const ScopedEnv idle(ddp::env::kTcpKeepIdle, "10");
    const ScopedEnv interval(ddp::env::kTcpKeepIntvl, "3");
    const ScopedEnv count(ddp::env::kTcpKeepCnt, "5");
    const ScopedEnv user_timeout(ddp::env::kTcpUserTimeout, "0");
    const TcpLiveness liveness = ddp::tcp_liveness_from_env();
    CHECK(liveness.keepidle_s == 10);
    CHECK(liveness.keepintvl_s == 3);
    CHECK(liveness.keepcnt == 5);
    CHECK(liveness.user_timeout_ms == 0);
    TcpPair pair;
    REQUIRE(ddp::set_tcp_liveness(pair.client.fd(), liveness));
    CHECK(tcp_socket_info(pair.client.fd()).keepidle_s == 10);
  }
  SECTION("a bad value is a ConfigError naming the variable, the value and the range") {
    SECTION("not a number") {
      const ScopedEnv bad(ddp::env::kTcpUserTimeout, "3s");
      CHECK_THROWS_AS(ddp::tcp_liveness_from_env(), ddp::ConfigError);
      CHECK_THROWS_WITH(ddp::tcp_liveness_from_env(),
                        "DDPLAUNCH_TCP_USER_TIMEOUT='3s': expected an integer >= 0");
    }
    SECTION("below the range") {
      const ScopedEnv bad(ddp::env::kTcpKeepIdle, "0");
      CHECK_THROWS_WITH(ddp::tcp_liveness_from_env(),
                        "DDPLAUNCH_TCP_KEEPIDLE='0': expected an integer in [1, 32767]");
    }
    SECTION("above the kernel's limit") {
      const ScopedEnv bad(ddp::env::kTcpKeepCnt, "128");
      CHECK_THROWS_WITH(ddp::tcp_liveness_from_env(),
                        "DDPLAUNCH_TCP_KEEPCNT='128': expected an integer in [1, 127]");
    }
    SECTION("negative") {
      const ScopedEnv bad(ddp::env::kTcpKeepIntvl, "-1");
      CHECK_THROWS_WITH(ddp::tcp_liveness_from_env(),
                        "DDPLAUNCH_TCP_KEEPINTVL='-1': expected an integer in [1, 32767]");
    }
  }
}
