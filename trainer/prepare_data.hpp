#pragma once
// From --data to the train/validation split every rank holds (identically: same file, same
// seed), features standardized with the training split's statistics.
#include "trainer/dataset.hpp"
#include "trainer/train_options.hpp"

namespace ddp::trainer {

// Loads (or generates) the data and splits it by options.seed. DataError for bad files,
// ConfigError when the split leaves an empty part.
Split prepare_data(const TrainOptions& options);

}  // namespace ddp::trainer
