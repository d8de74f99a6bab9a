#pragma once
// --events_file: one JSON object per line (rendezvous, worker_start, worker_exit, restart,
// signal, membership_change, finish), each with "event", "time" (unix seconds), "agent_pid" and the
// facts of the event (rank, local_rank, pid, exit_code, signal, restart_count...).
#include <cstdio>
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
  void record(const std::string& name, nlohmann::json fields = nlohmann::json::object());

 private:
  std::FILE* file_ = nullptr;
};

}  // namespace ddp::launcher
