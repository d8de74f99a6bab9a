#include "launcher/output/error_report.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error_file_format.hpp"

namespace ddp::launcher {
namespace {

std::string json_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_null()) return "";
  return value.dump();
}

// Timestamps system_clock can hold (its nanoseconds end in 2262); anything else (NaN, inf,
// 1e300, negative) is no timestamp: converting it would be undefined behaviour.
std::optional<double> plausible_seconds(double seconds) {
  constexpr double kMaxSeconds = 9e9;
  if (!std::isfinite(seconds) || seconds < 0 || seconds > kMaxSeconds) return std::nullopt;
  return seconds;
}

std::optional<double> json_seconds(const nlohmann::json& value) {
  if (value.is_number()) return plausible_seconds(value.get<double>());
  if (value.is_string()) {
    try {
      return plausible_seconds(std::stod(value.get<std::string>()));
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

std::chrono::system_clock::time_point failure_time(const WorkerFailure& failure) {
  if (failure.error && failure.error->timestamp) {
    const auto recorded = std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::duration<double>(*failure.error->timestamp)));
    // A worker records its error before it exits; a clock stamp later than the exit the
    // agent saw is not to be trusted over the agent's own observation.
    return std::min(recorded, failure.observed);
  }
  return failure.observed;
}

// The recorded time is the one failure_time() takes (not the later exit the agent saw), and it
// is known only to the second.
bool whole_seconds_only(const WorkerFailure& failure) {
  if (!failure.error || !failure.error->timestamp || !failure.error->whole_seconds) return false;
  return failure_time(failure) != failure.observed;
}

// When the file was last written, as unix seconds; nullopt when it cannot be read.
std::optional<double> modified_seconds(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return std::nullopt;
  return static_cast<double>(info.st_mtim.tv_sec) + static_cast<double>(info.st_mtim.tv_nsec) / 1e9;
}

// A whole-second timestamp refined by the file's modification time when that falls within the
// same second (the file was written right when the worker recorded it).
void refine_timestamp(ErrorFileContent& content, const std::string& path) {
  if (!content.timestamp || std::floor(*content.timestamp) != *content.timestamp) return;
  content.whole_seconds = true;
  const auto modified = modified_seconds(path);
  if (modified && *modified >= *content.timestamp && *modified < *content.timestamp + 1) {
    content.timestamp = modified;
    content.whole_seconds = false;
  }
}

std::string format_time(std::chrono::system_clock::time_point when, bool milliseconds = true) {
  // To the nearest millisecond: a time read from a file as seconds in a double is a hair off.
  const auto ms_since_epoch =
      std::chrono::round<std::chrono::milliseconds>(when.time_since_epoch()).count();
  std::time_t t = milliseconds ? static_cast<std::time_t>(ms_since_epoch / 1000)
                               : std::chrono::system_clock::to_time_t(when);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d_%H:%M:%S", &tm);
  if (!milliseconds) return buf;
  // Milliseconds: failures of one group are often within the same second.
  char frac[8];
  std::snprintf(frac, sizeof(frac), ".%03d", static_cast<int>(ms_since_epoch % 1000));
  return std::string(buf) + frac;
}

void append_failure(std::ostringstream& out, size_t index, const WorkerFailure& failure,
                    const std::string& host) {
  out << "[" << index << "]:\n";
  out << "  time      : " << format_time(failure_time(failure), !whole_seconds_only(failure))
      << "\n";
  out << "  host      : " << host << "\n";
  out << "  rank      : " << failure.rank << " (local_rank: " << failure.local_rank << ")\n";
  out << "  exitcode  : " << failure.status.shell_status();
  if (failure.status.signal != 0) {
    out << " (" << signal_name(failure.status.signal) << ", pid: " << failure.pid << ")\n";
  } else {
    out << " (pid: " << failure.pid << ")\n";
  }
  out << "  error_file: " << (failure.error ? failure.error_file : "<N/A>") << "\n";
  const bool hang_in_message = failure.error && failure.error->message.starts_with("hang: ");
  if (!failure.hang.empty() && !hang_in_message) out << "  hang      : " << failure.hang << "\n";
  if (failure.error) {
    if (!failure.error->message.empty()) out << "  message   : " << failure.error->message << "\n";
    std::string traceback = failure.error->traceback;
    if (!traceback.empty()) {
      out << "  traceback :\n";
      std::istringstream lines(traceback);
      for (std::string line; std::getline(lines, line);) out << "    " << line << "\n";
    }
  } else if (failure.status.signal != 0) {
    out << "  traceback : Signal " << failure.status.signal << " ("
        << signal_name(failure.status.signal) << ") received by PID " << failure.pid << "\n";
  } else {
    out << "  traceback : <N/A> (the worker wrote no error file; see its output above)\n";
  }
  if (!failure.output_tail.empty()) {
    out << "  stderr    : (last " << failure.output_tail.size() << " lines)\n";
    for (const auto& line : failure.output_tail) out << "    " << line << "\n";
  }
}

// One line saying why failures[root] was chosen, for the summary.
std::string root_cause_reason(const std::vector<WorkerFailure>& failures, size_t root) {
  const auto& r = failures[root];
  if (r.culprit) return "the rank named as the culprit of a hang (its hang report is above)";
  std::string how =
      r.error && r.error->timestamp
          ? "its error file was recorded at " + format_time(failure_time(r), !whole_seconds_only(r))
          : "the agent saw it exit at " + format_time(failure_time(r));
  if (failures.size() == 1) return "the only failure; " + how;
  return "the earliest of " + std::to_string(failures.size()) + " failures: " + how +
         " (by error-file time where a worker wrote one, else by when its exit was seen)";
}

}  // namespace

std::optional<ErrorFileContent> read_error_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  auto json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object() || !json.contains("message")) return std::nullopt;
  ErrorFileContent content;
  const auto& message = json["message"];
  if (message.is_object()) {
    content.message = json_text(message.value("message", nlohmann::json()));
    if (message.contains("extraInfo") && message["extraInfo"].is_object()) {
      const auto& extra = message["extraInfo"];
      content.traceback = json_text(extra.value("py_callstack", nlohmann::json()));
      content.timestamp = json_seconds(extra.value("timestamp", nlohmann::json()));
    }
  } else {
    content.message = json_text(message);
  }
  refine_timestamp(content, path);
  return content;
}

bool write_error_file(const std::string& path, const std::string& message,
                      const std::string& callstack) {
  return error_file::write(path, message, callstack);
}

size_t root_cause_index(const std::vector<WorkerFailure>& failures) {
  // The culprit of a hang caused its victims' failures, whatever the order they died in.
  const bool any_culprit =
      std::any_of(failures.begin(), failures.end(), [](const auto& f) { return f.culprit; });
  std::optional<size_t> best;
  for (size_t i = 0; i < failures.size(); ++i) {
    if (any_culprit && !failures[i].culprit) continue;
    if (!best || failure_time(failures[i]) < failure_time(failures[*best])) best = i;
  }
  return best.value_or(0);
}

std::string format_failure_summary(const std::string& program, const std::string& host,
                                   const std::vector<WorkerFailure>& failures) {
  const std::string rule(60, '=');
  const std::string thin(60, '-');
  std::ostringstream out;
  size_t root = root_cause_index(failures);
  out << rule << "\n" << program << " FAILED\n" << thin << "\nFailures:\n";
  size_t index = 1;
  bool others = false;
  for (size_t i = 0; i < failures.size(); ++i) {
    if (i == root) continue;
    append_failure(out, index++, failures[i], host);
    others = true;
  }
  if (!others) out << "  <NO_OTHER_FAILURES>\n";
  out << thin << "\nRoot Cause (first observed failure):\n";
  append_failure(out, 0, failures[root], host);
  out << "  why       : " << root_cause_reason(failures, root) << "\n";
  out << rule << "\n";
  return out.str();
}

std::string format_job_failure_summary(const std::string& program, const std::string& host,
                                       const std::vector<WorkerFailure>& local,
                                       const JobRootCause& root) {
  const std::string rule(60, '=');
  const std::string thin(60, '-');
  std::ostringstream out;
  out << rule << "\n"
      << program << " FAILED\n"
      << thin << "\nFailures on this node (" << host << "):\n";
  for (size_t i = 0; i < local.size(); ++i) append_failure(out, i + 1, local[i], host);
  if (local.empty()) out << "  <NONE: its workers were stopped because of the root cause below>\n";
  out << thin << "\nRoot Cause (the first failure of attempt " << root.attempt
      << ", the same on every node):\n";
  const auto when = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::duration<double>(root.time)));
  // A lost node's record was written before it died: the store saw it go at close time.
  out << "  time      : " << (root.time > 0 ? format_time(when) : "<when its connection closed>")
      << "\n";
  out << "  node      : " << root.node << " (" << root.host << ")\n";
  if (root.rank >= 0) {
    out << "  rank      : " << root.rank << " (local_rank: " << root.local_rank << ")\n";
  }
  out << "  exitcode  : " << root.exit_status;
  if (root.pid > 0) out << " (pid: " << root.pid << ")";
  out << "\n  what      : " << root.what << "\n";
  if (!root.traceback.empty()) {
    out << "  traceback :\n";
    std::istringstream lines(root.traceback);
    for (std::string line; std::getline(lines, line);) out << "    " << line << "\n";
  }
  out << rule << "\n";
  return out.str();
}

}  // namespace ddp::launcher
