#pragma once
// What an agent collaborator said, kept for its test: the events it recorded and the lines
// it logged (on the test's own thread: the loop the collaborator runs on).
#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/log.hpp"
#include "launcher/output/event_log.hpp"

namespace ddp::launcher::testing {

// An event log (no file) that keeps every event recorded through it.
struct RecordedEvents {
  RecordedEvents() {
    log.set_listener([this](const nlohmann::json& event) { all.push_back(event); });
  }
  RecordedEvents(const RecordedEvents&) = delete;
  RecordedEvents& operator=(const RecordedEvents&) = delete;

  // The events called name, in order.
  [[nodiscard]] std::vector<nlohmann::json> named(const std::string& name) const {
    std::vector<nlohmann::json> out;
    for (const auto& event : all) {
      if (event.value("event", "") == name) out.push_back(event);
    }
    return out;
  }

  EventLog log{std::nullopt};
  std::vector<nlohmann::json> all;
};

// Every line logged while it lives, instead of stderr.
struct LoggedLines {
  // True when a line says text.
  [[nodiscard]] bool logged(const std::string& text) const {
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& line) {
      return line.find(text) != std::string::npos;
    });
  }

  std::vector<std::string> lines;
  log::ScopedSink sink{[this](log::Level, std::string_view line) { lines.emplace_back(line); }};
};

}  // namespace ddp::launcher::testing
