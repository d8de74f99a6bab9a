#pragma once
// One client connection of the io_uring backend. It keeps one multishot recv armed (each
// arrival is a completion naming a provided buffer, handed to the session and given back)
// and at most one send in flight: replies queued meanwhile wait in a second buffer, so the
// bytes a send was given never move while the kernel may still read them.
#include <functional>
#include <memory>
#include <string>

#include "rendezvous/store/server/byte_transport.hpp"
#include "rendezvous/store/server/store_session.hpp"
#include "rendezvous/store/server/uring/ring.hpp"

namespace ddp::rendezvous {

class UringTransport final : public ByteTransport {
 public:
  // Called once when the connection closes; it is released once finished().
  using OnClosed = std::function<void(UringTransport*)>;

  // Takes ownership of fd (a connected socket); it is closed when the connection is
  // destroyed, after every request naming it has completed.
  UringTransport(int fd, UringRing& ring, OnClosed on_closed);
  ~UringTransport() override;
  UringTransport(const UringTransport&) = delete;
  UringTransport& operator=(const UringTransport&) = delete;

  // The session this connection carries; set once, before start().
  void attach(std::shared_ptr<StoreSession> session) { session_ = std::move(session); }
  [[nodiscard]] StoreSession& session() { return *session_; }
  // Arms the first recv; throws StoreError when no submission entry can be had.
  void start() { arm_recv(); }

  // Completions of this connection's requests (UringOp::kRecv, kSend).
  void on_recv(const io_uring_cqe& cqe);
  void on_send(const io_uring_cqe& cqe);
  // Closed, and no request of it is in flight any more: it may be destroyed.
  [[nodiscard]] bool finished() const { return closed_ && in_flight_ == 0; }

  void write(std::string_view bytes) override { queued_.append(bytes); }
  void flush() override;
  [[nodiscard]] size_t queued_bytes() const override {
    return queued_.size() + (sending_.size() - sent_);
  }
  void set_reading(bool on) override;
  void enable_liveness() override;
  void close() override;

 private:
  void arm_recv();
  // Sends sending_[sent_, end).
  void send_rest();

  int fd_;
  UringRing& ring_;
  OnClosed on_closed_;
  std::shared_ptr<StoreSession> session_;
  std::string queued_;   // replies behind the send in flight
  std::string sending_;  // the send in flight's bytes; sending_[0, sent_) are sent
  size_t sent_ = 0;
  int in_flight_ = 0;  // requests whose last completion has not arrived
  bool recv_armed_ = false;
  bool send_in_flight_ = false;
  bool reading_ = true;
  bool closed_ = false;
};

}  // namespace ddp::rendezvous
