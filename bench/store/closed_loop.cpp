#include "closed_loop.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/ip/address.hpp>
#include <thread>

#include "bench/common/process_cpu.hpp"
#include "common/error.hpp"
#include "rendezvous/store/auth.hpp"

namespace ddp::bench {

using Clock = std::chrono::steady_clock;
namespace wire = rendezvous::wire;

namespace {

sockaddr_storage resolve(const LoadOptions& o, socklen_t& len) {
  const auto address = boost::asio::ip::make_address(o.host);  // throws on a bad address
  sockaddr_storage ss{};
  if (address.is_v4()) {
    auto* sa = reinterpret_cast<sockaddr_in*>(&ss);
    sa->sin_family = AF_INET;
    sa->sin_port = htons(o.port);
    const auto bytes = address.to_v4().to_bytes();
    std::copy(bytes.begin(), bytes.end(), reinterpret_cast<unsigned char*>(&sa->sin_addr));
    len = sizeof(sockaddr_in);
  } else {
    auto* sa = reinterpret_cast<sockaddr_in6*>(&ss);
    sa->sin6_family = AF_INET6;
    sa->sin6_port = htons(o.port);
    const auto bytes = address.to_v6().to_bytes();
    std::copy(bytes.begin(), bytes.end(), sa->sin6_addr.s6_addr);
    len = sizeof(sockaddr_in6);
  }
  return ss;
}

// Blocking connect, retried while the listen backlog overflows (1024 clients at once).
int connect_one(const sockaddr_storage& ss, socklen_t len, size_t id, Clock::time_point deadline) {
  for (;;) {
    const int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fail_client(id, "socket: " + errno_text(errno));
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&ss), len) == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return fd;
    }
    const int err = errno;
    ::close(fd);
    if (Clock::now() > deadline) fail_client(id, "connect: " + errno_text(err));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void recv_exact(int fd, char* out, size_t n, size_t id) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::recv(fd, out + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      fail_client(id, r == 0 ? "server closed the connection"
                             : "no reply to the warm-up request: " + errno_text(errno));
    }
    got += static_cast<size_t>(r);
  }
}

std::string recv_string(int fd, size_t id) {
  char len[8];
  recv_exact(fd, len, sizeof len, id);
  std::string s(wire::get_u64(len), '\0');
  recv_exact(fd, s.data(), s.size(), id);
  return s;
}

wire::Request request(wire::Command command, std::vector<std::string> keys = {},
                      std::vector<std::string> values = {}) {
  wire::Request r;
  r.command = command;
  r.keys = std::move(keys);
  r.values = std::move(values);
  return r;
}

// What TcpStore does at connect with a secret: VALIDATE + the probe's CHECK, AUTH_CHALLENGE,
// AUTH_PROOF (three round trips).
void authenticate(int fd, const LoadOptions& o, size_t id) {
  wire::Request validate = request(wire::Command::kValidate);
  validate.nonce = wire::kValidationMagic;
  send_all(fd,
           wire::encode_request(validate, wire::Dialect::kV2) +
               wire::encode_request(request(wire::Command::kCheck, {wire::kExtensionProbeKey}),
                                    wire::Dialect::kV2),
           id);
  char byte = 0;
  recv_exact(fd, &byte, 1, id);
  if (byte != static_cast<char>(wire::kCheckReady)) fail_client(id, "not a ddplaunch store");
  send_all(fd, wire::encode_request(request(wire::Command::kAuthChallenge), wire::Dialect::kNative),
           id);
  recv_exact(fd, &byte, 1, id);
  const std::string server_nonce = recv_string(fd, id);
  if (byte != static_cast<char>(wire::kAuthRequired)) fail_client(id, "the store has no secret");
  const std::string client_nonce = rendezvous::auth::random_nonce();
  send_all(fd,
           wire::encode_request(
               request(wire::Command::kAuthProof, {client_nonce},
                       {rendezvous::auth::client_proof(o.secret, server_nonce, client_nonce)}),
               wire::Dialect::kNative),
           id);
  recv_exact(fd, &byte, 1, id);
  const std::string server_proof = recv_string(fd, id);
  if (!rendezvous::auth::same_mac(
          server_proof, rendezvous::auth::server_proof(o.secret, server_nonce, client_nonce))) {
    fail_client(id, "the store did not prove the secret");
  }
}

// One untimed blocking round trip (handshake + ADD), given 30 s: a server that accepted the
// connection but never answers fails the run instead of hanging it.
void warm_up(int fd, const LoadOptions& o, size_t id) {
  timeval limit{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  std::string hello;
  if (!o.secret.empty()) {
    authenticate(fd, o, id);
  } else if (o.dialect == wire::Dialect::kV2) {
    wire::Request validate = request(wire::Command::kValidate);
    validate.nonce = wire::kValidationMagic;
    hello = wire::encode_request(validate, o.dialect);
  }
  wire::Request add = request(wire::Command::kAdd, {"bench/warmup"});
  add.delta = 1;
  send_all(fd, hello + wire::encode_request(add, o.dialect), id);
  char reply[8];
  recv_exact(fd, reply, sizeof reply, id);
  timeval none{0, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
}

}  // namespace

void send_all(int fd, std::string_view bytes, size_t id) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail_client(id, "send: " + errno_text(errno));
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

void fail_client(size_t id, const std::string& what) {
  throw StoreError("store_bench: client " + std::to_string(id) + ": " + what);
}

ClosedLoop::ClosedLoop(const LoadOptions& options) : options_(options) {
  socklen_t len = 0;
  const sockaddr_storage ss = resolve(options, len);
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  clients_.resize(static_cast<size_t>(options.clients));
  for (size_t i = 0; i < clients_.size(); ++i) {
    Client& c = clients_[i];
    const auto connect_started = Clock::now();
    c.fd = connect_one(ss, len, i, deadline);
    const std::string key = "bench/" + std::to_string(i);
    wire::Request set;
    set.command = wire::Command::kSet;
    set.keys = {key};
    set.values = {std::string(options.value_bytes, 'x')};
    wire::Request get;
    get.command = wire::Command::kGet;
    get.keys = {key};
    wire::Request add;
    add.command = wire::Command::kAdd;
    add.keys = {"bench/counter"};
    add.delta = 1;
    // SET has no reply, so it travels with a GET of the same key; that GET's reply ends the
    // round trip and checks the value.
    c.set_get =
        wire::encode_request(set, options.dialect) + wire::encode_request(get, options.dialect);
    c.add = wire::encode_request(add, options.dialect);
    c.in.reserve(8 + options.value_bytes);
    c.samples.reserve(static_cast<size_t>(options.requests_per_client) / 3 * 2 + 2);
    warm_up(c.fd, options, i);
    connect_us_.push_back(
        std::chrono::duration<double, std::micro>(Clock::now() - connect_started).count());
  }
}

ClosedLoop::~ClosedLoop() {
  for (auto& c : clients_) {
    if (c.fd >= 0) ::close(c.fd);
  }
}

void ClosedLoop::start() {
  start_ = Clock::now();
  cpu_start_ = process_cpu_seconds();
}

std::string_view ClosedLoop::next(size_t i) {
  Client& c = clients_[i];
  if (c.sent >= options_.requests_per_client) {
    ++finished_;
    return {};
  }
  const bool set_get = c.set_get_next;
  c.set_get_next = !c.set_get_next;
  c.expected = set_get ? 8 + options_.value_bytes : 8;
  c.in.clear();
  c.sent += set_get ? 2 : 1;
  requests_ += set_get ? 2 : 1;
  c.started = Clock::now();
  return set_get ? c.set_get : c.add;
}

bool ClosedLoop::received(size_t i, std::string_view bytes) {
  Client& c = clients_[i];
  if (c.in.size() + bytes.size() > c.expected) {
    fail_client(i, "the server sent bytes nobody asked for");
  }
  c.in.append(bytes);
  if (c.in.size() < c.expected) return false;
  if (c.expected > 8 && wire::get_u64(c.in.data()) != options_.value_bytes) {
    fail_client(i, "GET returned " + std::to_string(wire::get_u64(c.in.data())) +
                       " bytes, expected " + std::to_string(options_.value_bytes));
  }
  c.expected = 0;
  c.samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - c.started).count());
  return true;
}

LoadResult ClosedLoop::finish() {
  LoadResult result;
  result.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  result.cpu_seconds = process_cpu_seconds() - cpu_start_;
  result.requests = requests_;
  result.connect_us = connect_us_;
  for (auto& c : clients_) {
    result.round_trip_us.insert(result.round_trip_us.end(), c.samples.begin(), c.samples.end());
  }
  return result;
}

}  // namespace ddp::bench
