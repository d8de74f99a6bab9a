#include "trainer/dataset.hpp"

#include <cmath>

#include "common/error.hpp"
#include "trainer/rng.hpp"

namespace ddp::trainer {

Dataset select_rows(const Dataset& data, std::span<const std::size_t> indices) {
  Dataset out;
  out.num_features = data.num_features;
  out.num_classes = data.num_classes;
  out.features.reserve(indices.size() * data.num_features);
  out.labels.reserve(indices.size());
  for (const std::size_t i : indices) {
    const auto r = data.row(i);
    out.features.insert(out.features.end(), r.begin(), r.end());
    out.labels.push_back(data.labels[i]);
  }
  return out;
}

Split split_by_seed(const Dataset& data, double val_fraction, uint64_t seed) {
  if (!(val_fraction >= 0.0 && val_fraction < 1.0)) {
    throw ConfigError("--val_fraction " + std::to_string(val_fraction) +
                      ": expected a value in [0, 1)");
  }
  const std::size_t n = data.rows();
  const auto n_val = static_cast<std::size_t>(std::llround(val_fraction * static_cast<double>(n)));
  if (n_val >= n || (val_fraction > 0.0 && n_val == 0)) {
    throw ConfigError("--val_fraction " + std::to_string(val_fraction) + " of " +
                      std::to_string(n) + " rows leaves " + std::to_string(n - n_val) +
                      " training and " + std::to_string(n_val) +
                      " validation rows: expected both to be non-empty");
  }
  const auto perm = seeded_permutation(n, seed);
  const std::span<const std::size_t> all(perm);
  Split split;
  split.validation = select_rows(data, all.first(n_val));
  split.train = select_rows(data, all.subspan(n_val));
  return split;
}

Standardizer Standardizer::fit(const Dataset& data) {
  const std::size_t f = data.num_features;
  std::vector<double> sum(f, 0.0);
  std::vector<double> sum_sq(f, 0.0);
  for (std::size_t i = 0; i < data.rows(); ++i) {
    const auto r = data.row(i);
    for (std::size_t j = 0; j < f; ++j) {
      const auto v = static_cast<double>(r[j]);
      sum[j] += v;
      sum_sq[j] += v * v;
    }
  }
  Standardizer s;
  s.mean_.resize(f);
  s.inv_std_.resize(f);
  const double n = std::max<double>(1.0, static_cast<double>(data.rows()));
  for (std::size_t j = 0; j < f; ++j) {
    const double mean = sum[j] / n;
    const double var = std::max(0.0, sum_sq[j] / n - mean * mean);
    s.mean_[j] = static_cast<float>(mean);
    // A constant column (digits has several all-zero pixels) is centred, not blown up.
    s.inv_std_[j] = var > 1e-12 ? static_cast<float>(1.0 / std::sqrt(var)) : 1.0F;
  }
  return s;
}

void Standardizer::apply(Dataset& data) const {
  const std::size_t f = data.num_features;
  for (std::size_t i = 0; i < data.rows(); ++i) {
    float* r = data.features.data() + i * f;
    for (std::size_t j = 0; j < f; ++j) r[j] = (r[j] - mean_[j]) * inv_std_[j];
  }
}

void validate(const Dataset& data, const std::string& origin) {
  if (data.rows() == 0) throw DataError(origin + ": no data rows");
  if (data.num_features == 0) throw DataError(origin + ": rows have no feature columns");
  if (data.features.size() != data.rows() * data.num_features) {
    throw DataError(origin + ": " + std::to_string(data.features.size()) + " feature values for " +
                    std::to_string(data.rows()) + " rows of " + std::to_string(data.num_features) +
                    " features");
  }
  for (std::size_t i = 0; i < data.rows(); ++i) {
    if (data.labels[i] < 0 || data.labels[i] >= data.num_classes) {
      throw DataError(origin + ": row " + std::to_string(i) + " has label " +
                      std::to_string(data.labels[i]) + ", expected 0.." +
                      std::to_string(data.num_classes - 1));
    }
  }
}

}  // namespace ddp::trainer
