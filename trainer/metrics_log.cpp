#include "trainer/metrics_log.hpp"

#include <cerrno>

#include "common/error.hpp"

namespace ddp::trainer {

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  if (path_.empty()) return;
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
