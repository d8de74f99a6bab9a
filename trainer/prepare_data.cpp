#include "trainer/prepare_data.hpp"

#include "trainer/data_loaders.hpp"

namespace ddp::trainer {

Split prepare_data(const TrainOptions& options) {
  Dataset all;
  if (options.data == "synthetic") {
    SyntheticOptions s;
    s.rows = options.synthetic_rows;
    s.num_features = options.synthetic_features;
    s.num_classes = options.synthetic_classes;
    s.seed = options.seed;
    s.separation = options.synthetic_separation;
    all = make_synthetic(s);
  } else {
    LoadOptions load;
    load.label_column = options.label_column;
    all = load_dataset(options.data, load);
  }
  // A different stream than init's and the sampler's, so changing one never shifts the others.
  Split split = split_by_seed(all, options.val_fraction, options.seed ^ 0x5157'4C49'5453ULL);
  if (options.standardize) {
    const Standardizer scaler = Standardizer::fit(split.train);
    scaler.apply(split.train);
    scaler.apply(split.validation);
  }
  return split;
}

}  // namespace ddp::trainer
