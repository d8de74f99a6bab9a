#include "node_loss.hpp"

#include <poll.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "common/log.hpp"
#include "rendezvous/dynamic_rendezvous.hpp"
#include "sim_store.hpp"

namespace ddp::bench {

using rendezvous::DynamicRendezvous;
using rendezvous::RendezvousInfo;

namespace {

constexpr int32_t kSpawned = 1;  // the helper forked an agent (pid)
constexpr int32_t kReady = 2;    // that agent holds its round, presence bound (value: group rank)
constexpr int32_t kFailed = 3;   // that agent could not join

// One spawn request through the helper's pipe (fixed size: one write, one read).
struct Request {
  uint16_t port = 0;
  int32_t min_nodes = 0;
  int32_t max_nodes = 0;
  int32_t presence = 1;
  int32_t heartbeat_ms = 0;
  int32_t lease_ms = 0;
  int32_t last_call_ms = 0;
  char run_id[96] = {};
};

bool read_full(int fd, void* data, size_t size) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

void write_full(int fd, const void* data, size_t size) {
  // Pipe writes of at most PIPE_BUF bytes are atomic, so replies of several processes sharing
  // one pipe never interleave.
  ssize_t n = 0;
  do {
    n = ::write(fd, data, size);
  } while (n < 0 && errno == EINTR);
}

void reply(int fd, int32_t kind, int32_t value) {
  const NodeFactory::Reply r{kind, static_cast<int32_t>(::getpid()), value};
  write_full(fd, &r, sizeof r);
}

// The killed agent: joins, reports, and sits in its round (its watcher threads beating)
// until a signal ends or stops it.
[[noreturn]] void run_agent(const Request& r, int reply_fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ddp::log::set_sink([](ddp::log::Level, std::string_view) {});
  try {
    const uint16_t port = r.port;
    auto store = std::make_shared<SimStore>(connect_store(port), r.presence != 0);
    auto o = elastic_options(r.run_id, r.min_nodes, r.max_nodes);
    o.heartbeat_interval = std::chrono::milliseconds(r.heartbeat_ms);
    o.lease_timeout = std::chrono::milliseconds(r.lease_ms);
    o.last_call_timeout = std::chrono::milliseconds(r.last_call_ms);
    DynamicRendezvous rdzv(o, store, [port] { return connect_store(port); });
    const RendezvousInfo info = rdzv.next_rendezvous();
    reply(reply_fd, kReady, info.group_rank);
    while (true) ::pause();
  } catch (const std::exception&) {
    reply(reply_fd, kFailed, 0);
  }
  ::_exit(1);
}

// The helper: single-threaded, forks one agent per request until its pipe closes.
[[noreturn]] void run_helper(pid_t parent, int request_fd, int reply_fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(0);
  ::signal(SIGCHLD, SIG_IGN);  // killed agents are reaped by the kernel
  Request r;
  while (read_full(request_fd, &r, sizeof r)) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(request_fd);
      run_agent(r, reply_fd);
    }
    const NodeFactory::Reply spawned{pid > 0 ? kSpawned : kFailed, static_cast<int32_t>(pid), 0};
    write_full(reply_fd, &spawned, sizeof spawned);
  }
  ::_exit(0);
}

}  // namespace

NodeFactory::NodeFactory() {
  int to_helper[2];
  int from_helper[2];
  if (::pipe(to_helper) != 0 || ::pipe(from_helper) != 0) {
    throw std::runtime_error(std::string("failure_bench: pipe: ") + std::strerror(errno));
  }
  const pid_t parent = ::getpid();
  helper_ = ::fork();
  if (helper_ < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (helper_ == 0) {
    ::close(to_helper[1]);
    ::close(from_helper[0]);
    run_helper(parent, to_helper[0], from_helper[1]);
  }
  ::close(to_helper[0]);
  ::close(from_helper[1]);
  request_fd_ = to_helper[1];
  reply_fd_ = from_helper[0];
}

NodeFactory::~NodeFactory() {
  ::close(request_fd_);  // the helper's read ends: it exits
  ::close(reply_fd_);
}

pid_t NodeFactory::spawn(const LostNodeSpec& spec) {
  Request r;
  r.port = spec.port;
  r.min_nodes = spec.min_nodes;
  r.max_nodes = spec.max_nodes;
  r.presence = spec.presence ? 1 : 0;
  r.heartbeat_ms = spec.heartbeat_ms;
  r.lease_ms = spec.lease_ms;
  r.last_call_ms = spec.last_call_ms;
  if (spec.run_id.size() >= sizeof r.run_id) throw std::runtime_error("run_id too long");
  std::copy(spec.run_id.begin(), spec.run_id.end(), r.run_id);
  write_full(request_fd_, &r, sizeof r);
  const auto deadline = Deadline::after(std::chrono::seconds(30));
  while (true) {
    const Reply reply = next_reply(deadline);
    if (reply.kind == kSpawned) return reply.pid;
    if (reply.kind == kFailed && reply.value == 0 && reply.pid <= 0) {
      throw std::runtime_error("failure_bench: the helper could not fork an agent");
    }
    early_.push_back(reply);
  }
}

int NodeFactory::wait_ready(pid_t pid, std::chrono::seconds timeout) {
  const auto deadline = Deadline::after(timeout);
  while (true) {
    auto it = std::find_if(early_.begin(), early_.end(), [&](const Reply& r) {
      return r.pid == pid && (r.kind == kReady || r.kind == kFailed);
    });
    Reply reply;
    if (it != early_.end()) {
      reply = *it;
      early_.erase(it);
    } else {
      reply = next_reply(deadline);
      if (reply.pid != pid) {
        early_.push_back(reply);
        continue;
      }
    }
    if (reply.kind == kReady) return reply.value;
    if (reply.kind == kFailed) {
      throw std::runtime_error("failure_bench: the agent in process " + std::to_string(pid) +
                               " could not join its rendezvous");
    }
  }
}

NodeFactory::Reply NodeFactory::next_reply(const Deadline& deadline) {
  pollfd p{reply_fd_, POLLIN, 0};
  while (true) {
    const int n = ::poll(&p, 1, deadline.poll_timeout_ms());
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) throw std::runtime_error("failure_bench: no word from the forked agent in time");
    break;
  }
  Reply reply;
  if (!read_full(reply_fd_, &reply, sizeof reply)) {
    throw std::runtime_error("failure_bench: the agent helper process is gone");
  }
  return reply;
}

const char* loss_kind_name(LossKind kind) {
  switch (kind) {
    case LossKind::kKill:
      return "SIGKILL, presence";
    case LossKind::kKillNoPresence:
      return "SIGKILL, no presence (lease)";
    case LossKind::kStop:
      return "SIGSTOP (lease)";
  }
  return "?";
}

namespace {

// SIGKILLs the forked agent when a repeat ends, however it ends (a stopped one too).
struct KillOnExit {
  explicit KillOnExit(pid_t p) : pid(p) {}
  pid_t pid;
  KillOnExit(const KillOnExit&) = delete;
  KillOnExit& operator=(const KillOnExit&) = delete;
  ~KillOnExit() { ::kill(pid, SIGKILL); }
};

struct Survivor {
  std::unique_ptr<DynamicRendezvous> rdzv;
  RendezvousInfo first;
  RendezvousInfo reformed;
};

}  // namespace

LossResult bench_loss(rendezvous::StoreServer& server, NodeFactory& factory,
                      const LossOptions& options) {
  LossResult result;
  const auto n = static_cast<size_t>(options.nodes);
  const size_t survivors_n = n - 1;
  const uint16_t port = server.port();
  constexpr auto kGuard = std::chrono::seconds(120);
  for (int rep = 0; rep < options.repeats; ++rep) {
    const std::string run_id = "loss-" + std::to_string(static_cast<int>(options.kind)) + "-" +
                               std::to_string(n) + "-" + std::to_string(rep);
    LostNodeSpec spec;
    spec.port = port;
    spec.run_id = run_id;
    spec.min_nodes = std::max(1, options.nodes - 1);
    spec.max_nodes = options.nodes;
    spec.presence = options.kind != LossKind::kKillNoPresence;
    spec.heartbeat_ms = options.heartbeat_ms;
    spec.lease_ms = options.lease_ms;
    spec.last_call_ms = options.last_call_ms;
    const pid_t victim = factory.spawn(spec);
    const KillOnExit reap{victim};

    std::vector<Survivor> survivors(survivors_n);
    for (auto& s : survivors) {
      auto o = elastic_options(run_id, spec.min_nodes, spec.max_nodes);
      o.heartbeat_interval = std::chrono::milliseconds(options.heartbeat_ms);
      o.lease_timeout = std::chrono::milliseconds(options.lease_ms);
      o.last_call_timeout = std::chrono::milliseconds(options.last_call_ms);
      s.rdzv = std::make_unique<DynamicRendezvous>(o, connect_store(port),
                                                   [port] { return connect_store(port); });
    }
    // Round 0 with everybody (it closes when the N-th arrives).
    on_threads(survivors_n,
               [&](size_t i) { survivors[i].first = survivors[i].rdzv->next_rendezvous(); });
    factory.wait_ready(victim, kGuard);
    for (const auto& s : survivors) {
      if (s.first.group_world_size != options.nodes) {
        throw std::runtime_error("failure_bench: round 0 closed without every node");
      }
    }

    Arrivals told(survivors_n);
    Arrivals reformed(survivors_n);
    for (size_t i = 0; i < survivors_n; ++i) {
      survivors[i].rdzv->watch([&told, i](rendezvous::MembershipChange) { told.mark(i); });
    }
    Clock::time_point signalled;
    std::thread killer([&] {
      // Every survivor thread below is started (and waiting) before the signal goes out.
      std::this_thread::sleep_for(std::chrono::milliseconds(100) +
                                  std::chrono::microseconds(200) * static_cast<int>(n));
      signalled = Clock::now();
      ::kill(victim, options.kind == LossKind::kStop ? SIGSTOP : SIGKILL);
    });
    std::exception_ptr error;
    try {
      on_threads(survivors_n, [&](size_t i) {
        told.wait_one(i, kGuard, "told of the loss");
        survivors[i].reformed = survivors[i].rdzv->next_rendezvous();
        reformed.mark(i);
      });
    } catch (...) {
      error = std::current_exception();
    }
    killer.join();
    if (error) std::rethrow_exception(error);
    result.told_ms.push_back(millis(told.last() - signalled));
    result.reformed_ms.push_back(millis(reformed.last() - signalled));
    for (const auto& s : survivors) {
      if (s.reformed.group_world_size != options.nodes - 1 ||
          s.reformed.round != s.first.round + 1) {
        throw std::runtime_error(
            "failure_bench: the survivors did not re-form round 1 without "
            "the lost node");
      }
    }
    // Their watcher threads each take up to a heartbeat to stop: stop them all at once.
    on_threads(survivors_n, [&](size_t i) { survivors[i].rdzv.reset(); });
  }
  return result;
}

}  // namespace ddp::bench
