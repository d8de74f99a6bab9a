#include "launcher/output/event_log.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "common/error.hpp"

namespace ddp::launcher {

EventLog::EventLog(const std::optional<std::string>& path) {
  if (!path) return;
  file_ = std::fopen(path->c_str(), "a");
  if (file_ == nullptr) {
    throw ConfigError("--events_file=" + *path + ": cannot open for writing: " + errno_text(errno));
  }
}

EventLog::~EventLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void EventLog::record(const std::string& name, const nlohmann::json& fields) {
  if (file_ == nullptr && !listener_) return;
  auto now = std::chrono::system_clock::now().time_since_epoch();
  nlohmann::json line = {{"event", name}, {"time", std::chrono::duration<double>(now).count()}};
  line.update(fields);
  if (listener_) listener_(line);
  if (file_ == nullptr) return;
  auto text = line.dump() + "\n";
  std::fwrite(text.data(), 1, text.size(), file_);
  // Flushed per event: the file is what a user reads after a crash of the agent itself.
  std::fflush(file_);
}

void EventLog::set_listener(std::function<void(const nlohmann::json&)> listener) {
  listener_ = std::move(listener);
}

}  // namespace ddp::launcher
