#pragma once
// Metrics reduced across ranks: each metric is a (sum, count) pair; reduce() all-reduces all
// pairs in one collective, so every rank reports the same global mean (loss, accuracy) instead
// of its own shard's.
#include <cstdint>
#include <map>
#include <string>

#include "worker_runtime/process_group.hpp"

namespace ddp::worker_runtime {

struct MetricValue {
  double sum = 0;
  double count = 0;
  [[nodiscard]] double mean() const { return count > 0 ? sum / count : 0.0; }
};

class MetricAccumulator {
 public:
  // Adds value (already a sum over `count` items, e.g. correct predictions) to metric name.
  void add(const std::string& name, double sum, double count = 1.0);
  // Local (this rank's) values.
  [[nodiscard]] const std::map<std::string, MetricValue>& local() const { return metrics_; }
  // Global values: sums and counts over every rank. Every rank must hold the same metric
  // names; CollectiveError naming this rank's names otherwise. Does not reset.
  std::map<std::string, MetricValue> reduce(ProcessGroup& group) const;
  void reset() { metrics_.clear(); }

 private:
  std::map<std::string, MetricValue> metrics_;
};

}  // namespace ddp::worker_runtime
