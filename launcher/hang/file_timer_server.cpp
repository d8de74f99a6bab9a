#include "launcher/hang/file_timer_server.hpp"

#include <signal.h>

#include <algorithm>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "common/error.hpp"

namespace ddp::launcher {

namespace asio = boost::asio;
using json = nlohmann::json;

namespace {

// Warnings for the first kWarnFirst bad requests, then one per kWarnEvery.
constexpr uint64_t kWarnFirst = 10;
constexpr uint64_t kWarnEvery = 100;
// The timer is armed at most this far ahead, then re-armed: a wall-clock step cannot
// postpone an expiry by more than this.
constexpr double kMaxWaitSeconds = 60;

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct Request {
  int pid = 0;
  std::string scope;
  double expiration_time = 0;
  int signal = 0;
};

// The request in line, or nullopt with *error saying what is wrong.
std::optional<Request> parse_request(std::string_view line, std::string* error) {
  json doc = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    *error = "not JSON";
    return std::nullopt;
  }
  if (!doc.is_object()) {
    *error = "not a JSON object";
    return std::nullopt;
  }
  // torch writes version 1 and never checks it; a request without one is taken as 1.
  if (auto it = doc.find("version"); it != doc.end() && (!it->is_number_integer() || *it != 1)) {
    *error = "unknown version " + it->dump() + " (expected 1)";
    return std::nullopt;
  }
  auto integer = [&](const char* key, long long min, long long max) -> std::optional<int> {
    auto it = doc.find(key);
    if (it == doc.end() || !it->is_number_integer()) {
      *error = std::string("\"") + key + "\" missing or not an integer";
      return std::nullopt;
    }
    // A huge unsigned value would wrap as long long: check it as unsigned first.
    if (it->is_number_unsigned() && it->get<unsigned long long>() > static_cast<uint64_t>(max)) {
      *error = std::string("\"") + key + "\" out of range";
      return std::nullopt;
    }
    long long value = it->get<long long>();
    if (value < min || value > max) {
      *error = std::string("\"") + key + "\" = " + std::to_string(value) + " out of range [" +
               std::to_string(min) + ", " + std::to_string(max) + "]";
      return std::nullopt;
    }
    return static_cast<int>(value);
  };
  Request request;
  // pid <= 0 would make kill(2) signal a whole process group, or every process we may signal.
  auto pid = integer("pid", 1, INT_MAX);
  if (!pid) return std::nullopt;
  request.pid = *pid;
  auto scope = doc.find("scope_id");
  if (scope == doc.end() || !scope->is_string()) {
    *error = "\"scope_id\" missing or not a string";
    return std::nullopt;
  }
  request.scope = scope->get<std::string>();
  auto expiration = doc.find("expiration_time");
  if (expiration == doc.end() || !expiration->is_number() ||
      !std::isfinite(expiration->get<double>())) {
    *error = "\"expiration_time\" missing or not a number";
    return std::nullopt;
  }
  request.expiration_time = expiration->get<double>();
  // Signals <= 0 are allowed: torch's client sends 0 on release, and such a timer expires
  // without a kill.
  auto signal = integer("signal", INT_MIN, SIGRTMAX);
  if (!signal) return std::nullopt;
  request.signal = *signal;
  return request;
}

}  // namespace

struct FileTimerServer::Impl : std::enable_shared_from_this<Impl> {
  struct Deadline {
    double expiration_time = 0;
    int signal = 0;
  };

  explicit Impl(asio::io_context& io) : timer(io), signal_timer(io) {}

  void on_line(std::string_view line);
  void rearm();
  void expire();
  void forget(int pid);
  // Sends the signals whose dump grace has passed; re-arms signal_timer for the next one.
  void send_due_signals();
  // kill(2), with a warning naming the timer when it fails for another reason than ESRCH.
  int send(int pid, int sig, const std::string& scope);

  std::unique_ptr<FifoReader> reader;
  asio::steady_timer timer;
  std::chrono::milliseconds dump_grace{0};
  struct Pending {
    int signal = 0;
    std::string scope;
    std::chrono::steady_clock::time_point due;
  };
  std::map<int, Pending> pending;  // pid -> the signal that follows its stack dump
  asio::steady_timer signal_timer;
  std::map<std::pair<int, std::string>, Deadline> timers;  // (pid, scope) -> deadline
  ExpiryHandler on_expired;
  std::function<bool(int)> accept_pid;
  WarningSink warn = warn_through_log;
  uint64_t requests = 0;
  uint64_t bad = 0;
  bool stopped = false;
};

FileTimerServer::FileTimerServer(asio::io_context& io, std::filesystem::path fifo_path,
                                 ExpiryHandler on_expired)
    : impl_(std::make_shared<Impl>(io)) {
  impl_->on_expired = std::move(on_expired);
  // The reader belongs to impl_ and stops with it, so the raw pointer never dangles.
  Impl* impl = impl_.get();
  impl_->reader = std::make_unique<FifoReader>(
      io, std::move(fifo_path), [impl](std::string_view line) { impl->on_line(line); });
}

FileTimerServer::~FileTimerServer() {
  impl_->stopped = true;
  impl_->reader->close();
  impl_->timer.cancel();
  impl_->signal_timer.cancel();
}

const std::filesystem::path& FileTimerServer::path() const {
  return impl_->reader->path();
}

void FileTimerServer::clear(int pid) {
  impl_->forget(pid);
  impl_->rearm();
}

void FileTimerServer::clear_all() {
  impl_->timers.clear();
  impl_->pending.clear();
  impl_->rearm();
}

void FileTimerServer::set_stack_dump_grace(std::chrono::milliseconds grace) {
  impl_->dump_grace = grace;
}

void FileTimerServer::set_pid_filter(std::function<bool(int pid)> accept) {
  impl_->accept_pid = std::move(accept);
}

void FileTimerServer::set_warning_sink(WarningSink sink) {
  if (!sink) sink = warn_through_log;
  impl_->warn = sink;
  impl_->reader->set_warning_sink(std::move(sink));
}

size_t FileTimerServer::active_timers() const {
  return impl_->timers.size();
}
uint64_t FileTimerServer::requests() const {
  return impl_->requests;
}
uint64_t FileTimerServer::bad_requests() const {
  return impl_->bad;
}

void FileTimerServer::Impl::on_line(std::string_view line) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
  if (line.empty()) return;
  ++requests;
  std::string error;
  std::optional<Request> request = parse_request(line, &error);
  if (request && accept_pid && !accept_pid(request->pid)) {
    error = "pid " + std::to_string(request->pid) + " is not one of this agent's workers";
    request.reset();
  }
  if (!request) {
    ++bad;
    if (bad <= kWarnFirst || bad % kWarnEvery == 0) {
      warn("ignored a bad file-timer request on '" + reader->path().string() + "' (" + error +
           "): '" + excerpt(line) + "' (" + std::to_string(bad) + " bad so far)");
    }
    return;
  }
  auto key = std::make_pair(request->pid, std::move(request->scope));
  if (request->expiration_time < 0) {
    timers.erase(key);  // torch: a negative expiration_time releases the timer
  } else {
    timers[std::move(key)] = Deadline{request->expiration_time, request->signal};
  }
  rearm();
}

void FileTimerServer::Impl::rearm() {
  if (stopped) return;
  if (timers.empty()) {
    timer.cancel();
    return;
  }
  double earliest = timers.begin()->second.expiration_time;
  for (const auto& entry : timers) earliest = std::min(earliest, entry.second.expiration_time);
  double wait = std::clamp(earliest - wall_now(), 0.0, kMaxWaitSeconds);
  // expires_after cancels the wait in flight; a wake-up that was already queued finds
  // nothing due and re-arms, so stale wake-ups are harmless.
  timer.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(wait)));
  timer.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
    auto self = weak.lock();
    if (!self || self->stopped || ec == asio::error::operation_aborted) return;
    self->expire();
  });
}

void FileTimerServer::Impl::expire() {
  double now = wall_now();
  // pid -> its expired timers, (expiration_time, scope, signal)
  std::map<int, std::vector<std::tuple<double, std::string, int>>> expired;
  for (const auto& [key, deadline] : timers) {
    if (deadline.expiration_time <= now) {
      expired[key.first].emplace_back(deadline.expiration_time, key.second, deadline.signal);
    }
  }
  std::vector<ExpiredTimer> reports;
  for (auto& [pid, list] : expired) {
    // As torch: the earliest expired timer that asks for a signal (> 0) decides it; when
    // none does, the pid is reported but left alone.
    std::sort(list.begin(), list.end());
    auto chosen = std::find_if(list.begin(), list.end(),
                               [](const auto& entry) { return std::get<2>(entry) > 0; });
    if (chosen == list.end()) chosen = list.begin();
    ExpiredTimer report{pid, std::get<1>(*chosen), std::get<0>(*chosen),
                        std::max(0, std::get<2>(*chosen)), 0};
    forget(pid);
    if (report.signal > 0 && dump_grace.count() > 0) {
      report.kill_error = send(pid, SIGABRT, report.scope);
      report.stack_requested = report.kill_error == 0;
      if (report.stack_requested) {
        ::kill(pid, SIGCONT);  // a stopped process handles SIGABRT only once resumed
        pending[pid] =
            Pending{report.signal, report.scope, std::chrono::steady_clock::now() + dump_grace};
      }
    } else if (report.signal > 0) {
      report.kill_error = send(pid, report.signal, report.scope);
    }
    reports.push_back(std::move(report));
  }
  rearm();
  send_due_signals();
  std::sort(reports.begin(), reports.end(),
            [](const auto& a, const auto& b) { return a.expiration_time < b.expiration_time; });
  // Hold ourselves: a callback may clear timers (never destroy the server, but be safe).
  auto self = shared_from_this();
  for (const auto& report : reports) {
    if (stopped) break;
    if (on_expired) on_expired(report);
  }
}

void FileTimerServer::Impl::forget(int pid) {
  auto it = timers.lower_bound(std::make_pair(pid, std::string()));
  while (it != timers.end() && it->first.first == pid) it = timers.erase(it);
  // A pid cleared while its stack is dumped has exited: its signal must not reach a process
  // that reuses the pid.
  pending.erase(pid);
}

int FileTimerServer::Impl::send(int pid, int sig, const std::string& scope) {
  if (::kill(pid, sig) == 0) return 0;
  const int err = errno;
  if (err != ESRCH) {
    warn("file timer '" + scope + "' of pid " + std::to_string(pid) + " expired, but kill(" +
         std::to_string(pid) + ", " + std::to_string(sig) + ") failed: " + errno_text(err));
  }
  return err;
}

void FileTimerServer::Impl::send_due_signals() {
  if (stopped) return;
  const auto now = std::chrono::steady_clock::now();
  auto next = std::chrono::steady_clock::time_point::max();
  for (auto it = pending.begin(); it != pending.end();) {
    if (it->second.due > now) {
      next = std::min(next, it->second.due);
      ++it;
      continue;
    }
    send(it->first, it->second.signal, it->second.scope);
    it = pending.erase(it);
  }
  if (next == std::chrono::steady_clock::time_point::max()) return;
  signal_timer.expires_at(next);
  signal_timer.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
    auto self = weak.lock();
    if (!self || self->stopped || ec == asio::error::operation_aborted) return;
    self->send_due_signals();
  });
}

}  // namespace ddp::launcher
