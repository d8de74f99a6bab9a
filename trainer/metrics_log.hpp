#pragma once
// Rank 0's record of a run: one JSON object per line (appended, so a resumed run continues
// the same file) plus human progress lines on stdout.
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace ddp::trainer {

class MetricsLog {
 public:
  // Opens path for appending, creating its directory; "" disables the file.
  // Throws ConfigError with the errno text when it cannot be opened.
  explicit MetricsLog(const std::string& path);
  // Writes one record as a line and flushes it (a killed run keeps what it logged).
  void write(const nlohmann::json& record);

 private:
  std::string path_;
  std::ofstream file_;
};

}  // namespace ddp::trainer
