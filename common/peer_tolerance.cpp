#include "common/peer_tolerance.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/env_names.hpp"
#include "common/error.hpp"

namespace ddp {

std::chrono::milliseconds parse_peer_tolerance(const std::string& what, const std::string& text) {
  double number = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, number);
  const std::string unit(ptr, end);
  double scale = 0;
  if (unit.empty() || unit == "s") scale = 1000;
  if (unit == "ms") scale = 1;
  if (unit == "m") scale = 60000;
  constexpr double kMaxMs = 86400.0 * 1000;
  const double ms = number * scale;
  if (ec != std::errc() || ptr == text.data() || scale == 0 || !std::isfinite(ms) ||
      ms < static_cast<double>(kMinPeerTolerance.count()) || ms > kMaxMs) {
    throw ConfigError(what + "=" + text +
                      ": expected a duration from 1 s to 1 day, in seconds (15, 2.5) or with a "
                      "unit (500ms, 20s, 1m)");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(ms)));
}

std::chrono::milliseconds peer_tolerance_from_env() {
  const char* text = std::getenv(env::kPeerTolerance);
  if (text == nullptr || *text == '\0') return kDefaultPeerTolerance;
  return parse_peer_tolerance(env::kPeerTolerance, text);
}

std::string tolerance_seconds(std::chrono::milliseconds tolerance) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", static_cast<double>(tolerance.count()) / 1000.0);
  return text;
}

std::string tolerance_text(std::chrono::milliseconds tolerance) {
  return tolerance_seconds(tolerance) + " s";
}

}  // namespace ddp
