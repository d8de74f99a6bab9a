// libFuzzer target: a whole store-server connection (rendezvous/store/server/store_session.hpp)
// over a fake transport and a real ServerState, no sockets. The input is
//   byte 0: how the connection opens (bits 0-1: 0 raw bytes, so legacy 1.x or whatever the
//           bytes say; 1 the 2.x handshake first; 2 the handshake and the kNative probe;
//           3 like 2 with a second connection of the same kind alive beside it)
//           bit 2: small wire limits; bit 3: the server holds a job secret (unauthenticated
//           requests are confined to /worker/attempt_0/, AUTH_* run with a wrong proof);
//           bit 4: a small store quota (4 KiB, 16 keys)
//   byte 1: seed of how the rest is cut into reads (1 to 64 bytes each) and when the fake
//           socket is full, drains, or the second connection sends its own copy
//   the rest: the client's bytes.
// Bad frames close the connection (that is the answer); a crash, a sanitizer report, a leak,
// an exception out of the session or a second close is a bug.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "common/log.hpp"
#include "rendezvous/store/server/access_policy.hpp"
#include "rendezvous/store/server/byte_transport.hpp"
#include "rendezvous/store/server/server_state.hpp"
#include "rendezvous/store/server/store_session.hpp"
#include "rendezvous/store/wire_codec.hpp"

using namespace ddp::rendezvous;

namespace {

class FakeTransport final : public ByteTransport {
 public:
  void write(std::string_view bytes) override {
    if (closes > 0) std::abort();  // no writes after close()
    queued += bytes;
  }
  void flush() override {
    if (socket_full) return;
    queued.clear();
  }
  [[nodiscard]] size_t queued_bytes() const override { return queued.size(); }
  void set_reading(bool on) override { reading = on; }
  void close() override {
    if (++closes > 1) std::abort();  // the session closes once
  }

  std::string queued;
  bool socket_full = false;
  bool reading = true;
  int closes = 0;
};

// A tiny deterministic generator for the cuts (xorshift), so a crash reproduces.
class Cuts {
 public:
  explicit Cuts(uint8_t seed) : state_(0x9E3779B9u ^ (uint32_t{seed} * 0x01000193u)) {}
  uint32_t next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 17;
    state_ ^= state_ << 5;
    return state_;
  }

 private:
  uint32_t state_;
};

std::string opening(int mode) {
  if (mode == 0) return {};
  wire::Request hello;
  hello.command = wire::Command::kValidate;
  hello.nonce = wire::kValidationMagic;
  std::string out = wire::encode_request(hello, wire::Dialect::kV2);
  if (mode >= 2) {
    wire::Request probe;
    probe.command = wire::Command::kCheck;
    probe.keys = {wire::kExtensionProbeKey};
    out += wire::encode_request(probe, wire::Dialect::kV2);
  }
  return out;
}

struct Connection {
  Connection(const std::string& peer, ServerState& state, const SessionConfig& config)
      : session(std::make_shared<StoreSession>(peer, state, config, transport)) {}
  FakeTransport transport;
  std::shared_ptr<StoreSession> session;
};

}  // namespace

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry points are named so
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Closing lines for every bad frame would drown libFuzzer's own output.
  ddp::log::set_sink([](ddp::log::Level, std::string_view) {});
  return 0;
}

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry points are named so
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int mode = data[0] & 3;
  Cuts cuts(data[1]);
  const std::string bytes =
      opening(mode) + std::string(reinterpret_cast<const char*>(data) + 2, size - 2);

  ServerState state((data[0] & 16) != 0 ? StoreQuota(4096, 16) : StoreQuota());
  SessionConfig config;
  // Small limits as well, so the limit checks are reached by short inputs.
  if (data[0] & 4) config.limits = wire::Limits{16, 256, 8};
  AccessPolicy access("fuzz-secret");
  access.set_worker_namespace("/worker/attempt_0/");
  if (data[0] & 8) config.access = &access;
  auto first = std::make_unique<Connection>("10.0.0.1:1000", state, config);
  std::unique_ptr<Connection> second;
  if (mode == 3) second = std::make_unique<Connection>("10.0.0.2:2000", state, config);

  size_t pos = 0;
  while (pos < bytes.size() && !first->session->closed()) {
    const uint32_t r = cuts.next();
    const size_t n = std::min<size_t>(1 + (r & 63), bytes.size() - pos);
    first->session->received(std::string_view(bytes).substr(pos, n));
    pos += n;
    if (((r >> 8) & 7) == 0) first->transport.socket_full = !first->transport.socket_full;
    if (!first->transport.socket_full && ((r >> 11) & 3) == 0) {
      first->transport.flush();
      first->session->drained();
    }
    if (second && !second->session->closed() && ((r >> 13) & 7) == 0) {
      // The other client sends the same bytes so far (its waits are woken by the first).
      second->session->received(std::string_view(bytes).substr(0, pos));
    }
  }
  // The client leaves: cleanly, reset, or the server stops.
  switch (cuts.next() % 3) {
    case 0:
      first->session->read_ended(0);
      break;
    case 1:
      first->session->read_ended(ECONNRESET);
      break;
    default:
      first->session->stop();
      break;
  }
  first->transport.socket_full = false;
  first->transport.flush();
  first->session->drained();
  if (second) second->session->read_ended(ECONNRESET);
  if (!first->session->closed() || (second && !second->session->closed())) std::abort();
  // Every parked wait went with its connection.
  if (state.num_waiters() != 0) std::abort();
  // The server's loop drops a connection once it closed; the state lives on.
  first.reset();
  second.reset();
  (void)state.num_keys();
  return 0;
}
