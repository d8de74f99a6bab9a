#include "launcher/agent/standby_pool.hpp"

#include <algorithm>
#include <array>
#include <csignal>
#include <system_error>

#include "common/error.hpp"
#include "common/log.hpp"
#include "launcher/output/event_names.hpp"

namespace ddp::launcher {
namespace {

// A standby's output while it stands by, per stream, kept for the rank it will become.
constexpr size_t kHeldBytes = size_t{64} * 1024;
// Standbys that may die in a row while standing by before the pool gives up on them.
constexpr int kDeathsInARow = 3;

// The last few lines of text, joined with " | " (for a one-line warning).
std::string last_lines(const std::string& text, size_t count) {
  std::vector<std::string> lines;
  size_t end = text.size();
  while (end > 0 && lines.size() < count) {
    if (text[end - 1] == '\n') --end;
    const size_t begin = text.rfind('\n', end == 0 ? 0 : end - 1);
    const size_t from = begin == std::string::npos ? 0 : begin + 1;
    if (end > from) lines.insert(lines.begin(), text.substr(from, end - from));
    if (begin == std::string::npos) break;
    end = begin + 1;
  }
  std::string joined;
  for (const auto& line : lines) joined += (joined.empty() ? "" : " | ") + line;
  return joined;
}

}  // namespace

// Where a standby's output, exit and channel messages go: the pool while it stands by, the
// slot it is given afterwards. Shared by the spawner's callbacks and the channel's handler,
// which outlive the pool's entry.
struct StandbyPool::Standby::Route {
  std::array<std::string, 2> held;  // stdout, stderr while it stood by
  size_t dropped = 0;               // bytes beyond kHeldBytes
  WorkerCallbacks target;           // set by connect()
  RecoveryLink::MessageHandler on_message;
  std::function<void(ExitStatus)> pool_exit;  // before connect()
  std::function<void()> pool_hello;

  void hold(int stream, std::string_view bytes) {
    auto& text = held.at(stream == 2 ? 1 : 0);
    const size_t room = kHeldBytes - std::min(kHeldBytes, text.size());
    text.append(bytes.substr(0, room));
    dropped += bytes.size() - std::min(room, bytes.size());
  }
  void detach_pool() {
    pool_exit = nullptr;
    pool_hello = nullptr;
  }
};

struct StandbyPool::Entry {
  uint64_t id = 0;
  int pid = 0;
  bool hello = false;
  std::string error_file;
  std::chrono::steady_clock::time_point started;
  std::unique_ptr<RecoveryLink> link;
  std::shared_ptr<Standby::Route> route;
  std::unique_ptr<boost::asio::steady_timer> hello_timer;
};

void StandbyPool::Standby::connect(WorkerCallbacks callbacks,
                                   RecoveryLink::MessageHandler on_message) {
  route_->detach_pool();
  route_->target = std::move(callbacks);
  route_->on_message = std::move(on_message);
  for (int stream = 1; stream <= 2; ++stream) {
    auto& text = route_->held.at(static_cast<size_t>(stream - 1));
    if (!text.empty() && route_->target.on_output) route_->target.on_output(stream, text);
    text.clear();
  }
  if (route_->dropped > 0 && route_->target.on_output) {
    route_->target.on_output(2, "[ddplaunch: " + std::to_string(route_->dropped) +
                                    " bytes this process wrote while it stood by were not kept]\n");
  }
}

StandbyPool::StandbyPool(boost::asio::io_context& io, WorkerSpawner& spawner, EventLog& events,
                         int count, std::chrono::milliseconds hello_timeout,
                         std::filesystem::path dir, SpecMaker spec)
    : io_(io),
      spawner_(spawner),
      events_(events),
      count_(count),
      hello_timeout_(hello_timeout),
      dir_(std::move(dir)),
      spec_(std::move(spec)) {}

StandbyPool::~StandbyPool() {
  stop_all();
}

void StandbyPool::fill() {
  while (on_ && !stopping_ && static_cast<int>(standing_.size()) < count_) start_one();
}

void StandbyPool::start_one() {
  const uint64_t id = next_id_++;
  auto entry = std::make_unique<Entry>();
  entry->id = id;
  entry->route = std::make_shared<Standby::Route>();
  const std::filesystem::path dir = dir_ / ("standby_" + std::to_string(id));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  entry->error_file = (dir / "error.json").string();
  std::filesystem::remove(entry->error_file, ec);

  const auto route = entry->route;
  entry->route->pool_exit = [this, id](ExitStatus status) { on_exit(id, status); };
  entry->route->pool_hello = [this, id] { on_hello(id); };
  entry->link = std::make_unique<RecoveryLink>(io_, [route](const recovery::Message& message) {
    if (route->on_message) {
      route->on_message(message);
    } else if (message.type == recovery::kHello && route->pool_hello) {
      route->pool_hello();
    }
  });
  WorkerProcessSpec spec = spec_(entry->error_file);
  spec.channel_fd = entry->link->child_fd();
  spec.env.push_back(std::string(recovery::kEnvFd) + "=" + std::to_string(recovery::kChildFd));

  WorkerCallbacks callbacks;
  callbacks.on_output = [route](int stream, std::string_view bytes) {
    if (route->target.on_output) {
      route->target.on_output(stream, bytes);
    } else {
      route->hold(stream, bytes);
    }
  };
  callbacks.ready_for_output = [route](int stream) {
    return !route->target.ready_for_output || route->target.ready_for_output(stream);
  };
  callbacks.on_exit = [route](ExitStatus status) {
    if (route->target.on_exit) {
      route->target.on_exit(status);
    } else if (route->pool_exit) {
      route->pool_exit(status);
    }
  };
  try {
    entry->pid = spawner_.spawn(spec, std::move(callbacks));
  } catch (const Error& e) {
    turn_off(std::string("a standby worker could not be started: ") + e.what());
    return;
  }
  entry->link->close_child_end();
  entry->started = std::chrono::steady_clock::now();
  events_.record(event::kStandbyStart, {{"pid", entry->pid}});
  DDP_LOG_DEBUG("started a standby worker as pid " + std::to_string(entry->pid));

  // One that never listens (a program that cannot be parked) must not run on unseen.
  entry->hello_timer = std::make_unique<boost::asio::steady_timer>(io_, hello_timeout_);
  entry->hello_timer->async_wait([this, id](boost::system::error_code error) {
    if (error) return;
    Entry* late = find(id);
    if (late == nullptr || late->hello) return;
    turn_off("standby worker pid " + std::to_string(late->pid) +
             " did not listen on its recovery channel within --recovery_timeout (" +
             std::to_string(hello_timeout_.count()) +
             " ms): the program does not wait for its place (ddplaunch_recovery.Elastic, or the "
             "native runtime's init)");
  });
  standing_.push_back(std::move(entry));
}

StandbyPool::Entry* StandbyPool::find(uint64_t id) {
  for (auto& entry : standing_) {
    if (entry->id == id) return entry.get();
  }
  return nullptr;
}

void StandbyPool::on_hello(uint64_t id) {
  Entry* entry = find(id);
  if (entry == nullptr || entry->hello) return;
  entry->hello = true;
  entry->hello_timer.reset();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - entry->started)
                      .count();
  events_.record(event::kStandbyReady, {{"pid", entry->pid}, {"ms", ms}});
  DDP_LOG_DEBUG("standby worker pid " + std::to_string(entry->pid) + " stands by (ready in " +
                std::to_string(ms) + " ms)");
}

void StandbyPool::on_exit(uint64_t id, ExitStatus status) {
  const auto it = std::find_if(standing_.begin(), standing_.end(),
                               [id](const auto& entry) { return entry->id == id; });
  if (it == standing_.end()) return;
  std::unique_ptr<Entry> entry = std::move(*it);
  standing_.erase(it);
  spawner_.release(entry->pid);
  if (stopping_ || !on_) return;
  events_.record(event::kStandbyExit, {{"pid", entry->pid},
                                       {"exit_code", status.exit_code},
                                       {"signal", status.signal},
                                       {"listening", entry->hello}});
  const std::string tail = last_lines(entry->route->held[1], 3);
  const std::string what = "standby worker pid " + std::to_string(entry->pid) + " exited (" +
                           status.describe() + ")" + (tail.empty() ? "" : ": " + tail);
  if (!entry->hello) {
    turn_off(what + ", before it listened on its recovery channel: the program cannot stand by");
    return;
  }
  if (++deaths_in_a_row_ >= kDeathsInARow) {
    turn_off(what + "; " + std::to_string(kDeathsInARow) +
             " standbys died in a row while standing by");
    return;
  }
  DDP_LOG_WARN(what + " while standing by; starting another");
  fill();
}

std::optional<StandbyPool::Standby> StandbyPool::take() {
  if (standing_.empty()) return std::nullopt;
  // Readiest first: listening beats starting; among equals, the one started first.
  const auto it =
      std::min_element(standing_.begin(), standing_.end(), [](const auto& a, const auto& b) {
        if (a->hello != b->hello) return a->hello;
        return a->started < b->started;
      });
  std::unique_ptr<Entry> entry = std::move(*it);
  standing_.erase(it);
  deaths_in_a_row_ = 0;
  entry->route->detach_pool();
  Standby standby;
  standby.pid = entry->pid;
  standby.link = std::move(entry->link);
  standby.hello = entry->hello;
  standby.error_file = entry->error_file;
  standby.started = entry->started;
  standby.route_ = entry->route;
  return standby;
}

void StandbyPool::turn_off(const std::string& why) {
  if (!on_) return;
  on_ = false;
  DDP_LOG_WARN("standby workers are off for this node: " + why +
               "; a worker that fails restarts this node's workers, as without standbys");
  events_.record(event::kStandbyOff, {{"reason", why}});
  for (const auto& entry : standing_) {
    entry->route->detach_pool();
    // Released once it is gone (the spawner outlives the agent, and so this pool).
    entry->route->pool_exit = [&spawner = spawner_, pid = entry->pid](ExitStatus) {
      spawner.release(pid);
    };
    spawner_.signal_group(entry->pid, SIGKILL);
  }
  standing_.clear();
}

void StandbyPool::stop_all() {
  stopping_ = true;
  for (const auto& entry : standing_) {
    entry->route->detach_pool();
    spawner_.release(entry->pid);  // SIGKILL to its process group, and forgotten
  }
  standing_.clear();
}

}  // namespace ddp::launcher
