#pragma once
// --events_file: one JSON object per line (rendezvous, worker_start, worker_exit, restart,
// signal, membership_change, finish), each with "event", "time" (unix seconds), "agent_pid" and the
// facts of the event (rank, local_rank, pid, exit_code, signal, restart_count...).
// A listener sees every event too, with or without a file (the health endpoint's metrics).
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace ddp::launcher {

class EventLog {
 public:
  // Opens path for appending; nullopt: events are dropped. Throws Error naming the file.
  explicit EventLog(const std::optional<std::string>& path);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Appends {"event": name, "time": now, ...fields} as one line and flushes it.
  void record(const std::string& name, const nlohmann::json& fields = nlohmann::json::object());
  // Also hands every event (the same object as the line) to listener, on the recording thread.
  void set_listener(std::function<void(const nlohmann::json&)> listener);

 private:
  std::FILE* file_ = nullptr;
  std::function<void(const nlohmann::json&)> listener_;
};

}  // namespace ddp::launcher
