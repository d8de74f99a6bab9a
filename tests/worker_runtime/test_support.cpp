#include "test_support.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace ddp::worker_runtime::test {

void run_ranks(int world, const std::function<void(int rank)>& fn) {
  std::vector<std::thread> threads;
  std::mutex mu;
  std::exception_ptr first;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!first) {
          first = std::current_exception();
        }
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  if (first) {
    std::rethrow_exception(first);
  }
}

std::mutex& catch_mutex() {
  static std::mutex mu;
  return mu;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::unique_ptr<GlooProcessGroup> make_group(std::shared_ptr<rendezvous::Store> store, int rank,
                                             int world, rendezvous::Duration connect_timeout,
                                             size_t direct_max_bytes) {
  GlooOptions o;
  o.rank = rank;
  o.size = world;
  o.timeout = std::chrono::seconds(20);
  o.connect_timeout = connect_timeout;
  o.bind_addr = "127.0.0.1";
  o.direct_max_bytes = direct_max_bytes;
  return std::make_unique<GlooProcessGroup>(std::move(store), o);
}

AgentChannel AgentChannel::make(ddp::Fd& worker_end) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    throw std::runtime_error("socketpair failed");
  }
  worker_end = ddp::Fd(fds[1]);
  return AgentChannel{ddp::Fd(fds[0]), {}, {}};
}

void AgentChannel::send(const recovery::Message& message) const {
  send_raw(recovery::format(message));
}

void AgentChannel::send_raw(const std::string& bytes) const {
  if (::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(bytes.size())) {
    throw std::runtime_error("cannot write to the worker's recovery channel");
  }
}

recovery::Message AgentChannel::read(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (const size_t nl = pending.find('\n'); nl != std::string::npos) {
      std::string error;
      auto message = recovery::parse(pending.substr(0, nl + 1), &error);
      pending.erase(0, nl + 1);
      if (!message) throw std::runtime_error("bad line from the worker: " + error);
      if (message->type == recovery::kBuilt) {
        built.push_back(message->integer("round"));
        continue;
      }
      return *message;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd.get(), POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) != 1) {
      throw std::runtime_error("no line from the worker within " + std::to_string(timeout.count()) +
                               " ms (got '" + pending + "')");
    }
    char chunk[512];
    const ssize_t n = ::read(fd.get(), chunk, sizeof(chunk));
    if (n <= 0) throw std::runtime_error("the worker closed its recovery channel");
    pending.append(chunk, static_cast<size_t>(n));
  }
}

}  // namespace ddp::worker_runtime::test
