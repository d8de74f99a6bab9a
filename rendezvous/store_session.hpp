#pragma once
// One client connection of the store server: reads bytes, lets the pure codec cut them into
// requests, hands those to ServerState, and writes replies. Lives on the server's loop.
#include <boost/asio/ip/tcp.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/server_state.hpp"
#include "rendezvous/wire_codec.hpp"

namespace ddp::rendezvous {

// What every session of one server shares: the limits and the name its log lines start with.
struct SessionConfig {
  wire::Limits limits;
  std::string log_name = "ddpstore";
};

class StoreSession final : public Connection, public std::enable_shared_from_this<StoreSession> {
 public:
  using OnClosed = std::function<void(StoreSession*)>;

  StoreSession(boost::asio::ip::tcp::socket socket, ServerState& state, const SessionConfig& config,
               OnClosed on_closed);
  StoreSession(const StoreSession&) = delete;
  StoreSession& operator=(const StoreSession&) = delete;

  // Starts reading; the session keeps itself alive through its pending operations.
  void start();
  // Closes the socket without a log line (server shutdown).
  void stop();

  void send(std::string_view bytes) override;
  [[nodiscard]] const std::string& peer() const override { return peer_; }

 private:
  void do_read();
  void on_read(const boost::system::error_code& ec, size_t n);
  // Parses and executes every complete request in the buffer. false: connection closed.
  bool process();
  void do_write();
  // Closes the connection; reason non-empty -> exactly one log line naming the peer.
  void close(const std::string& reason);

  boost::asio::ip::tcp::socket socket_;
  ServerState& state_;
  const SessionConfig& config_;
  OnClosed on_closed_;
  std::string peer_;
  wire::Dialect dialect_ = wire::Dialect::kUnknown;

  std::vector<char> in_;  // received bytes [in_begin_, in_end_)
  size_t in_begin_ = 0;
  size_t in_end_ = 0;
  size_t needed_ = 0;        // the codec's hint: don't parse again before this many bytes
  std::string out_next_;     // replies queued while a write is in flight
  std::string out_writing_;  // the bytes of the write in flight
  bool writing_ = false;
  bool read_paused_ = false;  // too many replies queued: not reading until they drain
  bool closed_ = false;
};

}  // namespace ddp::rendezvous
