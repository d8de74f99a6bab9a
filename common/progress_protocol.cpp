#include "common/progress_protocol.hpp"

#include <limits>

#include "common/parse_int.hpp"

namespace ddp::progress {

namespace {

constexpr std::string_view kVersion = "v1";
// A token quoted in an error is cut to this many bytes.
constexpr size_t kMaxQuotedBytes = 64;

std::string quoted(std::string_view token) {
  std::string out = "'";
  if (token.size() > kMaxQuotedBytes) {
    out.append(token.substr(0, kMaxQuotedBytes));
    out += "...";
  } else {
    out.append(token);
  }
  return out + "'";
}

bool is_space(char c) {
  return c == ' ' || c == '\t';
}

bool fail(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
  return false;
}

// Applies one key=value token to report; false (and error set) when a known key's value is bad.
bool apply(std::string_view token, Report& report, std::string* error) {
  size_t eq = token.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return fail(error, "bad token " + quoted(token) + ": expected key=value");
  }
  std::string_view key = token.substr(0, eq);
  std::string_view value = token.substr(eq + 1);
  auto bad = [&](const char* expected) {
    return fail(error,
                "bad token " + quoted(token) + ": expected " + std::string(key) + "=" + expected);
  };
  if (key == "rank") {
    auto v = try_parse_int(value, 0, std::numeric_limits<int>::max());
    if (!v) return bad("<int >= 0>");
    report.rank = static_cast<int>(*v);
  } else if (key == "pid") {
    auto v = try_parse_int(value, 1, std::numeric_limits<int>::max());
    if (!v) return bad("<int > 0>");
    report.pid = static_cast<int>(*v);
  } else if (key == "step") {
    auto v = try_parse_int(value, 0);
    if (!v) return bad("<int64 >= 0>");
    report.step = *v;
  } else if (key == "seq") {
    auto v = try_parse_int(value, 0);
    if (!v) return bad("<int64 >= 0>");
    report.seq = *v;
  } else if (key == "op") {
    if (value.empty()) return bad("<name>");
    report.op = std::string(value);
  } else if (key == "phase") {
    if (value == "enter") {
      report.phase = Phase::kEnter;
    } else if (value == "exit") {
      report.phase = Phase::kExit;
    } else {
      return bad("enter|exit");
    }
  }
  // Unknown keys are ignored: a later version may add some.
  return true;
}

}  // namespace

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kEnter:
      return "enter";
    case Phase::kExit:
      return "exit";
    case Phase::kNone:
      break;
  }
  return "";
}

std::string format(const Report& report) {
  std::string line = std::string(kVersion) + " rank=" + std::to_string(report.rank) +
                     " pid=" + std::to_string(report.pid) + " step=" + std::to_string(report.step);
  if (!report.op.empty()) {
    std::string op = report.op.substr(0, kMaxOpBytes);
    for (char& c : op) {
      if (static_cast<unsigned char>(c) <= ' ' || c == '\x7f') c = '_';
    }
    line += " op=" + op;
  }
  if (report.seq >= 0) line += " seq=" + std::to_string(report.seq);
  if (report.phase != Phase::kNone) line += std::string(" phase=") + phase_name(report.phase);
  return line + "\n";
}

std::optional<Report> parse(std::string_view line, std::string* error) {
  if (line.size() > kMaxLineBytes) {
    fail(error, "line of " + std::to_string(line.size()) + " bytes: expected at most " +
                    std::to_string(kMaxLineBytes) + " (PIPE_BUF)");
    return std::nullopt;
  }
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);

  Report report;
  bool first = true;
  size_t pos = 0;
  while (pos < line.size()) {
    if (is_space(line[pos])) {
      ++pos;
      continue;
    }
    size_t end = pos;
    while (end < line.size() && !is_space(line[end])) ++end;
    std::string_view token = line.substr(pos, end - pos);
    pos = end;
    if (first) {
      first = false;
      if (token != kVersion) {
        fail(error, "bad token " + quoted(token) + ": expected the version 'v1' first");
        return std::nullopt;
      }
      continue;
    }
    if (!apply(token, report, error)) return std::nullopt;
  }
  if (first) {
    fail(error, "empty line: expected 'v1 rank=<int> pid=<int> step=<int64> ...'");
    return std::nullopt;
  }
  const char* missing = report.rank < 0   ? "rank=<int>"
                        : report.pid <= 0 ? "pid=<int>"
                        : report.step < 0 ? "step=<int64>"
                                          : nullptr;
  if (missing != nullptr) {
    fail(error, "line " + quoted(line) + " has no " + missing + " (required)");
    return std::nullopt;
  }
  return report;
}

}  // namespace ddp::progress
