#include "worker_runtime/metrics.hpp"

#include <vector>

#include "common/error.hpp"

namespace ddp::worker_runtime {
namespace {

// FNV-1a of the sorted names: ranks holding different metric sets would otherwise add
// unrelated numbers together without noticing.
int64_t names_hash(const std::map<std::string, MetricValue>& metrics) {
  uint64_t h = 1469598103934665603ULL;
  for (const auto& [name, value] : metrics) {
    for (unsigned char c : name) {
      h = (h ^ c) * 1099511628211ULL;
    }
    h = (h ^ 0xffU) * 1099511628211ULL;  // separator
  }
  return static_cast<int64_t>(h >> 1);  // non-negative so that -h cannot overflow
}

}  // namespace

void MetricAccumulator::add(const std::string& name, double sum, double count) {
  auto& metric = metrics_[name];
  metric.sum += sum;
  metric.count += count;
}

std::map<std::string, MetricValue> MetricAccumulator::reduce(ProcessGroup& group) const {
  // max(h) == -max(-h) only when every rank holds the same hash.
  const int64_t h = names_hash(metrics_);
  std::vector<int64_t> check = {h, -h};
  group.all_reduce(std::span<int64_t>(check), ReduceOp::kMax);
  if (check[0] != -check[1]) {
    std::string names;
    for (const auto& [name, value] : metrics_) {
      names += (names.empty() ? "" : ", ") + name;
    }
    throw CollectiveError("metric reduce: ranks hold different metric names (rank " +
                          std::to_string(group.rank()) + " has [" + names +
                          "]); every rank must add() the same names");
  }
  std::vector<double> values;
  values.reserve(metrics_.size() * 2);
  for (const auto& [name, value] : metrics_) {
    values.push_back(value.sum);
    values.push_back(value.count);
  }
  group.all_reduce(std::span<double>(values), ReduceOp::kSum);
  std::map<std::string, MetricValue> out;
  size_t i = 0;
  for (const auto& [name, value] : metrics_) {
    out[name] = MetricValue{values[i], values[i + 1]};
    i += 2;
  }
  return out;
}

}  // namespace ddp::worker_runtime
