#include "store_load.hpp"

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>

#include "common/error.hpp"

namespace ddp::bench {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
namespace wire = rendezvous::wire;

double LoadResult::percentile_us(double p) const {
  if (round_trip_us.empty()) return 0;
  std::vector<double> v = round_trip_us;
  const auto idx = static_cast<size_t>(std::lround(p / 100.0 * static_cast<double>(v.size() - 1)));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(idx), v.end());
  return v[idx];
}

namespace {

struct Shared {
  asio::io_context io{1};  // one thread runs it: no locking
  tcp::endpoint endpoint;
  const LoadOptions* options = nullptr;
  int connected = 0;
  int finished = 0;
  uint64_t requests = 0;
  Clock::time_point connect_deadline;
  std::string error;
  std::vector<std::vector<double>> samples;  // per client
  std::function<void()> on_all_connected;
};

class LoadClient : public std::enable_shared_from_this<LoadClient> {
 public:
  LoadClient(Shared& shared, int id)
      : shared_(shared), id_(id), socket_(shared.io), timer_(shared.io) {
    const auto& o = *shared.options;
    const std::string key = "bench/" + std::to_string(id);
    wire::Request set;
    set.command = wire::Command::kSet;
    set.keys = {key};
    set.values = {std::string(o.value_bytes, 'x')};
    wire::Request get;
    get.command = wire::Command::kGet;
    get.keys = {key};
    wire::Request add;
    add.command = wire::Command::kAdd;
    add.keys = {"bench/counter"};
    add.delta = 1;
    // SET has no reply, so it travels with a GET of the same key; that GET's reply ends
    // the round trip and checks the value.
    set_get_frame_ = wire::encode_request(set, o.dialect) + wire::encode_request(get, o.dialect);
    add_frame_ = wire::encode_request(add, o.dialect);
    if (o.dialect == wire::Dialect::kV2) {
      wire::Request hello;
      hello.command = wire::Command::kValidate;
      hello.nonce = wire::kValidationMagic;
      handshake_ = wire::encode_request(hello, o.dialect);
    }
    shared_.samples[static_cast<size_t>(id)].reserve(
        static_cast<size_t>(o.requests_per_client) / 3 * 2 + 2);
  }

  void connect() {
    socket_.async_connect(shared_.endpoint, [self = shared_from_this()](auto ec) {
      if (!ec) {
        self->socket_.set_option(tcp::no_delay(true));
        self->warm_up();
        return;
      }
      if (Clock::now() > self->shared_.connect_deadline) {
        self->fail("connect: " + ec.message());
        return;
      }
      // Retry: a listen backlog overflows briefly when 1024 clients connect at once.
      self->socket_.close();
      self->timer_.expires_after(std::chrono::milliseconds(20));
      self->timer_.async_wait([self](auto) { self->connect(); });
    });
  }

  // One untimed round trip (handshake + ADD) so the clock starts only once the server has
  // accepted every connection and the load is steady.
  void warm_up() {
    wire::Request add;
    add.command = wire::Command::kAdd;
    add.keys = {"bench/warmup"};
    out_ = handshake_ + wire::encode_request(add, shared_.options->dialect);
    handshake_.clear();
    expected_ = 8;
    have_ = 0;
    warming_ = true;
    asio::async_write(socket_, asio::buffer(out_), [self = shared_from_this()](auto ec, size_t) {
      if (ec) return self->fail("write: " + ec.message());
      self->read_reply();
    });
  }

  void next() {
    if (done_ >= shared_.options->requests_per_client) {
      ++shared_.finished;
      return;
    }
    started_ = Clock::now();
    const bool set_get = (round_++ % 2) == 0;
    out_ = handshake_;
    handshake_.clear();
    out_ += set_get ? set_get_frame_ : add_frame_;
    done_ += set_get ? 2 : 1;
    shared_.requests += set_get ? 2 : 1;
    expected_ = set_get ? 8 + shared_.options->value_bytes : 8;
    have_ = 0;
    asio::async_write(socket_, asio::buffer(out_), [self = shared_from_this()](auto ec, size_t) {
      if (ec) return self->fail("write: " + ec.message());
      self->read_reply();
    });
  }

 private:
  // One read_some usually holds the whole reply; loop only when it does not.
  void read_reply() {
    if (in_.size() < expected_) in_.resize(expected_);
    socket_.async_read_some(asio::buffer(in_.data() + have_, expected_ - have_),
                            [self = shared_from_this()](auto ec, size_t n) {
                              if (ec) return self->fail("read: " + ec.message());
                              self->have_ += n;
                              if (self->have_ < self->expected_) return self->read_reply();
                              self->check_reply();
                            });
  }

  void check_reply() {
    if (expected_ > 8) {
      const uint64_t len = wire::get_u64(in_.data());
      if (len != shared_.options->value_bytes) {
        return fail("GET returned " + std::to_string(len) + " bytes, expected " +
                    std::to_string(shared_.options->value_bytes));
      }
    }
    finish_round();
  }

  void finish_round() {
    if (warming_) {
      warming_ = false;
      if (++shared_.connected == static_cast<int>(shared_.samples.size())) {
        shared_.on_all_connected();
      }
      return;
    }
    const auto us = std::chrono::duration<double, std::micro>(Clock::now() - started_).count();
    shared_.samples[static_cast<size_t>(id_)].push_back(us);
    next();
  }

  void fail(const std::string& what) {
    if (shared_.error.empty()) {
      shared_.error = "client " + std::to_string(id_) + ": " + what;
    }
    shared_.io.stop();
  }

  Shared& shared_;
  int id_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  std::string set_get_frame_, add_frame_, handshake_, out_;
  std::vector<char> in_;
  size_t expected_ = 0;  // bytes of the reply to the request in flight
  size_t have_ = 0;
  bool warming_ = false;
  int done_ = 0;
  uint64_t round_ = 0;
  Clock::time_point started_;
};

}  // namespace

LoadResult run_load(const LoadOptions& options) {
  Shared shared;
  shared.options = &options;
  shared.endpoint = tcp::endpoint(asio::ip::make_address(options.host), options.port);
  shared.samples.resize(static_cast<size_t>(options.clients));
  shared.connect_deadline = Clock::now() + std::chrono::seconds(30);
  std::vector<std::shared_ptr<LoadClient>> clients;
  clients.reserve(static_cast<size_t>(options.clients));
  for (int i = 0; i < options.clients; ++i) {
    clients.push_back(std::make_shared<LoadClient>(shared, i));
  }
  Clock::time_point start;
  shared.on_all_connected = [&] {
    start = Clock::now();
    for (auto& c : clients) c->next();
  };
  for (auto& c : clients) c->connect();
  shared.io.run();
  const auto end = Clock::now();
  if (!shared.error.empty()) throw StoreError("store_bench: " + shared.error);
  LoadResult result;
  result.seconds = std::chrono::duration<double>(end - start).count();
  result.requests = shared.requests;
  for (auto& s : shared.samples) {
    result.round_trip_us.insert(result.round_trip_us.end(), s.begin(), s.end());
  }
  return result;
}

}  // namespace ddp::bench
