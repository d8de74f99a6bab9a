#include "worker_runtime/recovery_client.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/parse_int.hpp"

namespace ddp::worker_runtime {
namespace {

// Writes every byte of line; SocketError on a broken channel (the agent is gone).
void write_all(int fd, const std::string& line) {
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::send(fd, line.data() + off, line.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw SocketError("cannot write to the agent's recovery channel (fd " + std::to_string(fd) +
                        "): " + errno_text(errno));
    }
    off += static_cast<size_t>(n);
  }
}

}  // namespace

RecoveryClient::RecoveryClient(Fd channel, int local_rank) : channel_(std::move(channel)) {
  // Inherited from the agent; a program this worker starts must not hold the agent's end.
  ::fcntl(channel_.get(), F_SETFD, FD_CLOEXEC);
  recovery::Message hello{std::string(recovery::kHello), {}};
  hello.set("pid", static_cast<int64_t>(::getpid())).set("local_rank", local_rank);
  send(hello);
  reader_ = std::thread([this] { read_loop(); });
}

RecoveryClient::~RecoveryClient() {
  ::shutdown(channel_.get(), SHUT_RDWR);  // wakes the reader's read()
  if (reader_.joinable()) reader_.join();
}

void RecoveryClient::set_group(ProcessGroup* group) {
  std::lock_guard lock(mu_);
  group_ = group;
  if (group_ != nullptr && changes_ > taken_) {
    group_->abort("the membership changed while the group was built");
  }
}

recovery::RoundNotice RecoveryClient::wait_round(Duration timeout) {
  std::unique_lock lock(mu_);
  const bool ready = cv_.wait_for(lock, timeout, [&] { return pending_.has_value() || eof_; });
  if (pending_) {
    recovery::RoundNotice notice = std::move(*pending_);
    pending_.reset();
    // Changes announced after this notice arrived are still pending: the group built for it
    // is aborted as soon as it exists (set_group), and the worker recovers again.
    taken_ = notice_changes_;
    return notice;
  }
  if (!ready) {
    throw RecoveryError("no round notice from the agent within " + std::to_string(timeout.count()) +
                        " ms on the recovery channel (waited after a failed collective)");
  }
  // Fatal, not another membership change: with the agent gone no round notice will come.
  throw RecoveryError(
      "the agent closed the recovery channel while this worker waited for the "
      "round notice (" +
      eof_reason_ + ")");
}

bool RecoveryClient::wait_change(Duration timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return changes_ > taken_ || pending_.has_value() || eof_; });
  if (changes_ > taken_ || pending_) return true;
  if (eof_) {
    throw RecoveryError(
        "the agent closed the recovery channel while this worker waited for "
        "a membership change (" +
        eof_reason_ + ")");
  }
  return false;
}

bool RecoveryClient::change_pending() const {
  std::lock_guard lock(mu_);
  return changes_ > taken_;
}

bool RecoveryClient::connected() const {
  std::lock_guard lock(mu_);
  return !eof_;
}

void RecoveryClient::send_joined(int64_t round, int rank, int64_t step, int source,
                                 int64_t state_bytes) {
  recovery::Message m{std::string(recovery::kJoined), {}};
  m.set("round", round).set("rank", rank).set("step", step).set("source", source);
  m.set("state_bytes", state_bytes);
  send(m);
}

void RecoveryClient::send_stepped(int64_t round, int64_t step) {
  recovery::Message m{std::string(recovery::kStepped), {}};
  m.set("round", round).set("step", step);
  send(m);
}

void RecoveryClient::send_built(int64_t round) {
  recovery::Message m{std::string(recovery::kBuilt), {}};
  m.set("round", round);
  send(m);
}

void RecoveryClient::send(const recovery::Message& message) {
  const std::string line = recovery::format(message);
  std::lock_guard lock(write_mu_);
  write_all(channel_.get(), line);
}

void RecoveryClient::read_loop() {
  std::string buffer;
  std::string reason = "end of file";
  char chunk[1024];
  for (;;) {
    const ssize_t n = ::read(channel_.get(), chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n < 0) reason = errno_text(errno);
      break;
    }
    buffer.append(chunk, static_cast<size_t>(n));
    for (size_t nl = buffer.find('\n'); nl != std::string::npos; nl = buffer.find('\n')) {
      const std::string line = buffer.substr(0, nl + 1);
      buffer.erase(0, nl + 1);
      std::string error;
      if (auto message = recovery::parse(line, &error)) {
        handle(*message);
      } else {
        DDP_LOG_WARN("recovery channel: ignoring a bad line from the agent: " + error);
      }
    }
    if (buffer.size() > recovery::kMaxLineBytes) {
      DDP_LOG_WARN("recovery channel: ignoring " + std::to_string(buffer.size()) +
                   " bytes without a newline (over the line limit)");
      buffer.clear();
    }
  }
  std::lock_guard lock(mu_);
  eof_ = true;
  eof_reason_ = reason;
  cv_.notify_all();
}

void RecoveryClient::handle(const recovery::Message& message) {
  try {
    if (message.type == recovery::kAbort) {
      const int64_t round = message.integer("round");
      on_change("the agent aborted round " + std::to_string(round) + " (" +
                (message.fields.contains("reason") ? message.text("reason") : "no reason") + ")");
      recovery::Message reply{std::string(recovery::kAborted), {}};
      reply.set("round", round);
      send(reply);
    } else if (message.type == recovery::kRound) {
      auto notice = recovery::RoundNotice::from_message(message);
      bool announced = false;
      {
        std::lock_guard lock(mu_);
        announced = round_announced_;
      }
      // A round with no abort before it still ends the old group.
      if (!announced) on_change("round " + std::to_string(notice.round) + " began");
      std::lock_guard lock(mu_);
      round_announced_ = false;
      notice_changes_ = changes_;
      pending_ = std::move(notice);
      cv_.notify_all();
    } else {
      DDP_LOG_WARN("recovery channel: ignoring a '" + message.type + "' line from the agent");
    }
  } catch (const std::exception& e) {
    DDP_LOG_WARN(std::string("recovery channel: ignoring a bad '") + message.type +
                 "' line: " + e.what());
  }
}

void RecoveryClient::on_change(const std::string& why) {
  std::lock_guard lock(mu_);
  ++changes_;
  round_announced_ = true;
  if (group_ != nullptr) group_->abort(why);
  cv_.notify_all();
}

std::unique_ptr<RecoveryClient> make_recovery_client(const EnvMap& env, int local_rank) {
  const auto it = env.find(recovery::kEnvFd);
  if (it == env.end() || it->second.empty()) return nullptr;
  const auto fd = try_parse_int(it->second, 0, INT32_MAX);
  if (!fd || ::fcntl(static_cast<int>(*fd), F_GETFD) < 0) {
    throw ConfigError(std::string(recovery::kEnvFd) + "='" + it->second +
                      "' is not an open descriptor (expected the number of the agent's "
                      "recovery channel, e.g. 3)");
  }
  std::optional<int64_t> wait_s = 60;
  const auto wait = env.find(recovery::kEnvChangeWait);
  if (wait != env.end() && !wait->second.empty()) {
    wait_s = try_parse_int(wait->second, 1, 86400);
    if (!wait_s) {
      throw ConfigError(std::string(recovery::kEnvChangeWait) + "='" + wait->second +
                        "': expected whole seconds from 1 to 86400");
    }
  }
  auto client = std::make_unique<RecoveryClient>(Fd(static_cast<int>(*fd)), local_rank);
  client->set_change_wait(std::chrono::seconds(*wait_s));
  return client;
}

std::unique_ptr<RecoveryClient> await_admission(EnvMap& env) {
  const auto flag = [&](const char* name) {
    const auto it = env.find(name);
    return it != env.end() && it->second == "1";
  };
  const bool standby = flag(recovery::kEnvStandby);
  if (!flag(recovery::kEnvSpare)) {
    if (standby) {
      throw ConfigError(std::string(recovery::kEnvStandby) + "=1 without " + recovery::kEnvSpare +
                        "=1: a standby worker is a parked spare; the agent sets both");
    }
    return nullptr;
  }
  // A standby's place is not known until its notice: it says hello as local rank 0 (the rank
  // only labels the hello; the agent knows each worker by its channel).
  int hello_rank = 0;
  if (!standby) {
    const auto local = env.find(env::kLocalRank);
    const auto local_rank =
        try_parse_int(local == env.end() ? std::string() : local->second, 0, INT32_MAX);
    if (!local_rank) {
      throw ConfigError(std::string(env::kLocalRank) +
                        " is not set to a rank >= 0 (a spare's worker, " + recovery::kEnvSpare +
                        "=1, needs it)");
    }
    hello_rank = static_cast<int>(*local_rank);
  }
  auto client = make_recovery_client(env, hello_rank);
  if (!client) {
    throw ConfigError(std::string(recovery::kEnvSpare) + "=1 without " + recovery::kEnvFd +
                      ": a spare's worker waits for its place on the agent's recovery channel");
  }
  // A spare stands by as long as the job runs: no deadline of its own (the agent closes the
  // channel when it leaves).
  const recovery::RoundNotice notice = client->wait_round(std::chrono::hours(24 * 365));
  if (standby && notice.local_rank < 0) {
    throw ProtocolError("the round notice " + std::to_string(notice.round) +
                        " that promotes this standby worker (" + recovery::kEnvStandby +
                        "=1) has no local_rank: expected local_rank=<int> >= 0, the place it "
                        "takes (an agent older than --standby_workers?)");
  }
  for (auto& [name, value] : recovery::place_variables(notice)) env[name] = value;
  env[env::kLocalWorldSize] = std::to_string(notice.local_world_size);
  // Only a standby takes LOCAL_RANK from the notice. A spare's was set by the agent when it
  // started, its place already known, and may be virtual (--virtual_local_rank: 0, with
  // CUDA_VISIBLE_DEVICES narrowed); a GPU chosen from it is right as it is.
  if (standby) env[env::kLocalRank] = std::to_string(notice.local_rank);
  env.erase(recovery::kEnvSpare);
  env.erase(recovery::kEnvStandby);
  return client;
}

}  // namespace ddp::worker_runtime
