// Bad input against the store server: bad frames, garbage, clients that never read.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <future>
#include <random>
#include <thread>

#include "tests/store/raw_client.hpp"
#include "tests/support/stderr_capture.hpp"

using namespace ddp::rendezvous;
using namespace ddp::test;
using namespace std::chrono_literals;

TEST_CASE("bad frames close only their own connection, one log line each", "[server][garbage]") {
  StoreServer server(loopback());
  auto good = client(server.port());
  good.set("k", "v");
  StderrCapture log;

  Raw unknown(server.port());
  unknown.send(std::string("\x63", 1));  // 2.x command 99
  CHECK(unknown.closed_by_server());

  Raw oversize(server.port());
  std::string frame("\x01", 1);  // SET with a 1 TB key
  wire::put_u64(frame, 1ULL << 40);
  oversize.send(frame);
  CHECK(oversize.closed_by_server());

  {
    Raw truncated(server.port());
    truncated.send(std::string("\x01\x05\x00", 3));  // SET, half a key length, then gone
  }
  Raw waiter(server.port());
  waiter.send(req(wire::Command::kWait, {"gone"}));
  CHECK(waiter.silent());
  waiter.conn.close();  // gone mid-wait: its wait is dropped, quietly (a client leaving)

  {
    Raw polite(server.port());  // a clean close between requests is not worth a line
    polite.send(req(wire::Command::kGetNumKeys));
    polite.recv_i64();
  }

  good.set("gone", "now");  // wakes nobody; must not touch the closed waiter
  CHECK(good.get("k") == "v");
  CHECK(good.get("gone") == "now");

  const auto lines = log.wait_lines(3);
  REQUIRE(lines.size() == 3);
  const std::vector<std::string> reasons = {"unknown command byte 99", "exceeds the limit",
                                            "truncated frame"};
  for (const auto& reason : reasons) {
    const auto n = std::count_if(lines.begin(), lines.end(), [&](const std::string& l) {
      return l.find(reason) != std::string::npos &&
             l.find("closing connection from 127.0.0.1:") != std::string::npos;
    });
    INFO(reason);
    CHECK(n == 1);
  }
}

TEST_CASE("100 garbage connections while a well-behaved client keeps working",
          "[server][garbage]") {
  StoreServer server(loopback());
  auto good = client(server.port());
  good.set("warm", "1");
  CHECK(good.get("warm") == "1");  // opens the good client's wait connection too
  const size_t good_connections = server.num_connections();
  std::atomic<bool> stop{false};
  std::thread noise([&] {
    std::mt19937 rng(1234);
    for (int i = 0; i < 100; ++i) {
      try {
        Raw c(server.port(), /*v2=*/(i % 2) == 0);
        std::string junk(1 + rng() % 4096, '\0');
        for (auto& ch : junk) ch = static_cast<char>(rng());
        c.send(junk);
      } catch (const ddp::StoreError&) {
        // the server may close on the first bad byte while we are still sending
      }
    }
    stop = true;
  });
  int64_t ops = 0;
  do {  // at least once: the noise may be done before this thread gets the CPU
    good.set("key", std::to_string(ops));
    CHECK(good.get("key") == std::to_string(ops));
    CHECK(good.add("ops", 1) == ops + 1);
    ++ops;
  } while (!stop);
  noise.join();
  good.ping();
  CHECK(good.num_keys() >= 2);
  // Garbage connections are gone again (the good client's remain).
  for (int i = 0; i < 100 && server.num_connections() > good_connections; ++i) {
    std::this_thread::sleep_for(20ms);
  }
  CHECK(server.num_connections() == good_connections);
}

TEST_CASE("a client that does not read its replies is paused, then served in full", "[server]") {
  StoreServer server(loopback());
  const std::string big(1024 * 1024, 'b');
  auto good = client(server.port());
  good.set("big", big);
  REQUIRE(good.check({"big"}));  // SET has no reply: make sure it landed before the burst
  Raw greedy(server.port());
  std::string burst;
  for (int i = 0; i < 40; ++i)
    burst += wire::encode_request(req(wire::Command::kGet, {"big"}), wire::Dialect::kV2);
  greedy.send(burst);  // 40 MiB of replies, none read yet
  // Everyone else is served meanwhile.
  for (int i = 0; i < 50; ++i) CHECK(good.add("others", 1) == i + 1);
  for (int i = 0; i < 40; ++i) {
    INFO("reply " << i);
    REQUIRE(greedy.recv_string() == big);
  }
  greedy.send(req(wire::Command::kGetNumKeys));
  CHECK(greedy.recv_i64() == 2);
}
