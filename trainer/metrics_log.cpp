#include "trainer/metrics_log.hpp"

#include <cerrno>
#include <filesystem>

#include "common/error.hpp"

namespace ddp::trainer {

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  if (path_.empty()) return;
  const auto parent = std::filesystem::path(path_).parent_path();
  std::error_code ignored;  // an existing parent is fine; open() reports real problems
  if (!parent.empty()) std::filesystem::create_directories(parent, ignored);
  errno = 0;
  file_.open(path_, std::ios::app);
  if (!file_) {
    throw ConfigError("--metrics " + path_ + ": cannot open for appending: " + errno_text(errno));
  }
}

void MetricsLog::write(const nlohmann::json& record) {
  if (path_.empty()) return;
  file_ << record.dump() << '\n';
  file_.flush();
  if (!file_) throw Error("--metrics " + path_ + ": write failed: " + errno_text(errno));
}

}  // namespace ddp::trainer
