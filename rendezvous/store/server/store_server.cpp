#include "rendezvous/store/server/store_server.hpp"

#include <atomic>
#include <cstdlib>
#include <future>
#include <mutex>
#include <thread>

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/tcp_liveness.hpp"
#include "rendezvous/store/server/epoll/loop.hpp"
#include "rendezvous/store/server/frame_deadlines.hpp"
#include "rendezvous/store/server/listener.hpp"
#include "rendezvous/store/server/peer_connections.hpp"
#include "rendezvous/store/server/server_state.hpp"
#include "rendezvous/store/server/store_session.hpp"
#include "rendezvous/store/server/uring/loop.hpp"

namespace ddp::rendezvous {
namespace {

// kAuto defers to DDPLAUNCH_STORE_IO, so a launcher- or runtime-hosted store can be switched
// without a flag; an explicit choice in the options wins.
StoreIo resolve_io(StoreIo requested) {
  if (requested != StoreIo::kAuto) return requested;
  const char* env = std::getenv(env::kStoreIo);
  if (env == nullptr || *env == '\0') return StoreIo::kAuto;
  if (auto io = parse_store_io(env)) return *io;
  throw ConfigError(std::string(env::kStoreIo) + "='" + env +
                    "' is not an I/O backend: expected auto, epoll or io_uring");
}

// Creates the loop on the calling thread (the one that will run it: io_uring requires it)
// and says which backend serves.
std::unique_ptr<ServerLoop> make_loop(StoreIo requested, const LoopContext& context,
                                      std::string& backend) {
  const StoreIo io = resolve_io(requested);
  if (io == StoreIo::kEpoll) {
    backend = "epoll";
    return std::make_unique<EpollLoop>(context);
  }
  try {
    auto loop = make_uring_loop(context);
    backend = "io_uring";
    return loop;
  } catch (const IoUringUnavailable& e) {
    if (io == StoreIo::kIoUring) {
      throw StoreError("store server on port " + std::to_string(context.port) +
                       ": io_uring was asked for but is unavailable: " + e.what());
    }
    backend = std::string("epoll (io_uring unavailable: ") + e.what() + ")";
    return std::make_unique<EpollLoop>(context);
  }
}

}  // namespace

std::optional<StoreIo> parse_store_io(const std::string& text) {
  if (text == "auto") return StoreIo::kAuto;
  if (text == "epoll") return StoreIo::kEpoll;
  if (text == "io_uring") return StoreIo::kIoUring;
  return std::nullopt;
}

struct StoreServer::Impl {
  explicit Impl(StoreServerOptions opts)
      : options(std::move(opts)),
        limits(resolve_limits(options.limits)),
        frames(limits.frame_timeout),
        input(limits.max_bytes),
        peers(limits.max_conns_per_peer),
        access(options.secret),
        session_config{
            {options.max_key_bytes, options.max_value_bytes, options.max_keys_per_request},
            &frames,
            limits.max_bytes,
            &input,
            &access},
        state(StoreQuota(limits.max_bytes, limits.max_keys)),
        listener(options.host, options.port) {}

  StoreServerOptions options;
  ServerLimits limits;  // resolved: no 0 field
  FrameDeadlines frames;
  InputBudget input;  // requests still arriving, all connections together
  PeerConnections peers;
  AccessPolicy access;
  SessionConfig session_config;
  ServerState state;
  Listener listener;  // declared before the loop: closed after it is gone
  std::atomic<size_t> num_connections{0};
  std::string backend;
  std::unique_ptr<ServerLoop> loop;
  std::thread thread;
  std::mutex stop_mu;
};

StoreServer::StoreServer(StoreServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {
  tcp_liveness_from_env();  // a bad DDPLAUNCH_TCP_* fails here, not as a warning per accept
  const unsigned buffers = impl_->options.io_uring_buffers;
  if (buffers == 0 || (buffers & (buffers - 1)) != 0 || buffers > 32768) {
    throw ConfigError("store server: io_uring_buffers " + std::to_string(buffers) +
                      " is not a power of two from 1 to 32768");
  }
  const LoopContext context{impl_->listener.fd(),   impl_->listener.port(),  &impl_->state,
                            &impl_->session_config, &impl_->num_connections, buffers,
                            &impl_->peers};
  std::promise<void> ready;
  auto started = ready.get_future();
  impl_->thread = std::thread([impl = impl_.get(), context, &ready] {
    try {
      impl->loop = make_loop(impl->options.io, context, impl->backend);
    } catch (...) {
      ready.set_exception(std::current_exception());
      return;
    }
    ready.set_value();
    try {
      impl->loop->run();
    } catch (const std::exception& e) {
      DDP_LOG_ERROR(std::string("event loop stopped: ") + e.what());
    }
  });
  try {
    started.get();
  } catch (...) {
    impl_->thread.join();
    throw;
  }
}

StoreServer::~StoreServer() {
  stop();
}

uint16_t StoreServer::port() const {
  return impl_->listener.port();
}

const std::string& StoreServer::host() const {
  return impl_->options.host;
}

const std::string& StoreServer::address() const {
  return impl_->listener.address();
}

const std::string& StoreServer::io_backend() const {
  return impl_->backend;
}

void StoreServer::stop() {
  std::lock_guard<std::mutex> lock(impl_->stop_mu);  // stop() from two threads: one joins
  if (!impl_->thread.joinable()) return;
  impl_->loop->stop();
  impl_->thread.join();
  impl_->loop.reset();
  impl_->listener.close();  // the port is free again once stop() returns
}

void StoreServer::set_worker_namespace(const std::string& prefix) {
  impl_->access.set_worker_namespace(prefix);
}

bool StoreServer::requires_auth() const {
  return impl_->access.requires_auth();
}

size_t StoreServer::num_connections() const {
  return impl_->num_connections.load();
}

const ServerLimits& StoreServer::limits() const {
  return impl_->limits;
}

}  // namespace ddp::rendezvous
