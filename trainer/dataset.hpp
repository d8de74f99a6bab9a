#pragma once
// In-memory classification data: float features (row-major) and one integer label per row.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ddp::trainer {

struct Dataset {
  std::vector<float> features;  // rows() x num_features, row-major
  std::vector<int32_t> labels;  // one per row, in [0, num_classes)
  std::size_t num_features = 0;
  int num_classes = 0;  // max label + 1 over the whole file (before any split)

  [[nodiscard]] std::size_t rows() const { return labels.size(); }
  // Features of one row.
  [[nodiscard]] std::span<const float> row(std::size_t i) const {
    return {features.data() + i * num_features, num_features};
  }
};

struct Split {
  Dataset train;
  Dataset validation;
};

// The rows of `data` listed in `indices`, in that order.
Dataset select_rows(const Dataset& data, std::span<const std::size_t> indices);

// Shuffles rows by `seed` and puts round(val_fraction * rows) of them in validation.
// Throws ConfigError unless 0 <= val_fraction < 1 and both parts end up non-empty
// (an empty validation part is allowed only for val_fraction == 0).
Split split_by_seed(const Dataset& data, double val_fraction, uint64_t seed);

// Per-feature mean and 1/stddev measured on one set and applied to others, so validation
// is scaled with the training statistics. Constant features get scale 1.
class Standardizer {
 public:
  // Measures mean and spread of every feature of `data`.
  static Standardizer fit(const Dataset& data);
  // Rewrites data.features in place as (x - mean) * inv_std.
  void apply(Dataset& data) const;

 private:
  std::vector<float> mean_;
  std::vector<float> inv_std_;
};

// Throws DataError naming `origin` unless every label is in [0, num_classes) and the
// feature buffer matches rows x num_features.
void validate(const Dataset& data, const std::string& origin);

}  // namespace ddp::trainer
