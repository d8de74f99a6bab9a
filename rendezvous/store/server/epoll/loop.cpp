#include "rendezvous/store/server/epoll/loop.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "common/error.hpp"
#include "common/log.hpp"

namespace ddp::rendezvous {

EpollLoop::EpollLoop(const LoopContext& context)
    : context_(context),
      accept_log_(context.port),
      loop_([this] { closed_.clear(); }),
      retry_timer_(loop_,
                   [this] {
                     if (!stopped_) loop_.rewatch(context_.listen_fd, EPOLLIN, this);
                   }),
      sweep_timer_(loop_, [this] { sweep_frames(); }) {}

EpollLoop::~EpollLoop() = default;

void EpollLoop::run() {
  loop_.watch(context_.listen_fd, EPOLLIN, this);
  if (context_.sessions->frames != nullptr) sweep_timer_.start(context_.sessions->frames->period());
  loop_.run();
}

void EpollLoop::sweep_frames() {
  if (stopped_) return;
  FrameDeadlines& frames = *context_.sessions->frames;
  frames.sweep(FrameDeadlines::Clock::now());
  sweep_timer_.start(frames.period());
}

void EpollLoop::stop() {
  loop_.post([this] { stop_all(); });
}

void EpollLoop::handle_events(uint32_t /*events*/) {
  if (stopped_ || accept_all()) return;
  retry_accept_later();
}

bool EpollLoop::accept_all() {
  // Drain the whole accept queue: when a thousand agents connect at once, one accept per
  // loop turn would leave the last ones queued behind everyone's requests.
  for (;;) {
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    const int fd = ::accept4(context_.listen_fd, reinterpret_cast<sockaddr*>(&address), &length,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      accept_log_.accepted();
      add_connection(fd, peer_name(address, length));
      continue;
    }
    const int err = errno;
    if (err == EAGAIN || err == EWOULDBLOCK) return true;
    if (err == EINTR || err == ECONNABORTED) continue;  // that client gave up; next one
    accept_log_.failed(err, context_.num_connections->load());
    return false;
  }
}

void EpollLoop::retry_accept_later() {
  // Level-triggered: a listener left in the set would wake the loop at once, again and again.
  loop_.rewatch(context_.listen_fd, 0, this);
  retry_timer_.start(std::chrono::milliseconds(50));
}

void EpollLoop::add_connection(int fd, const std::string& peer) {
  if (context_.peers != nullptr && !context_.peers->admit(peer)) {
    ::close(fd);  // one address holds too many connections already (logged per streak)
    return;
  }
  tune_connection(fd);
  auto connection =
      std::make_unique<EpollTransport>(fd, loop_, read_buffer_, [this](EpollTransport* c) {
        auto it = connections_.find(c);
        if (it == connections_.end()) return;  // stop_all() owns it now
        if (context_.peers != nullptr) context_.peers->release(c->session().peer());
        closed_.push_back(std::move(it->second));
        connections_.erase(it);
        --*context_.num_connections;
      });
  connection->attach(
      std::make_shared<StoreSession>(peer, *context_.state, *context_.sessions, *connection));
  try {
    connection->start();
  } catch (const Error& e) {
    DDP_LOG_WARN("dropping connection from " + peer + ": " + e.what());
    if (context_.peers != nullptr) context_.peers->release(peer);
    return;  // the connection's destructor closes the socket
  }
  connections_.emplace(connection.get(), std::move(connection));
  ++*context_.num_connections;
}

void EpollLoop::stop_all() {
  // Posted work runs after the turn's handlers, so no event still names a connection here.
  stopped_ = true;
  retry_timer_.cancel();
  sweep_timer_.cancel();
  loop_.forget(context_.listen_fd);
  auto all = std::move(connections_);
  connections_.clear();
  for (auto& [ptr, connection] : all) connection->session().stop();
  *context_.num_connections = 0;
  if (context_.peers != nullptr) context_.peers->clear();
  loop_.quit();
}

}  // namespace ddp::rendezvous
