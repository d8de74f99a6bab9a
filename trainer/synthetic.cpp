// The synthetic data set (--data synthetic) used by tests and benchmarks.
#include <cmath>

#include "common/error.hpp"
#include "trainer/data_loaders.hpp"
#include "trainer/rng.hpp"

namespace ddp::trainer {

Dataset make_synthetic(const SyntheticOptions& options) {
  if (options.rows == 0 || options.num_features == 0 || options.num_classes < 2) {
    throw ConfigError("synthetic data needs rows > 0, features > 0 and classes >= 2 (got " +
                      std::to_string(options.rows) + ", " + std::to_string(options.num_features) +
                      ", " + std::to_string(options.num_classes) + ")");
  }
  Rng rng(options.seed);
  const std::size_t f = options.num_features;
  std::vector<float> centres(static_cast<std::size_t>(options.num_classes) * f);
  // Two centres with coordinates ~ N(0, s^2) lie ~sqrt(2 f) s apart: pick s for `separation`.
  const double spread = options.separation / std::sqrt(2.0 * static_cast<double>(f));
  for (float& c : centres) c = static_cast<float>(rng.normal() * spread);
  Dataset data;
  data.num_features = f;
  data.num_classes = options.num_classes;
  data.features.resize(options.rows * f);
  data.labels.resize(options.rows);
  for (std::size_t i = 0; i < options.rows; ++i) {
    const auto label = static_cast<int32_t>(rng.below(static_cast<uint64_t>(options.num_classes)));
    data.labels[i] = label;
    const float* centre = centres.data() + static_cast<std::size_t>(label) * f;
    for (std::size_t j = 0; j < f; ++j) {
      data.features[i * f + j] = centre[j] + static_cast<float>(rng.normal());
    }
  }
  return data;
}

}  // namespace ddp::trainer
