#include "trainer/prepare_data.hpp"

#include <filesystem>

#include "common/error.hpp"
#include "trainer/data_loaders.hpp"

namespace ddp::trainer {
namespace {

// `--data digits`: the file scripts/fetch_digits.sh writes, relative to the repository root.
constexpr const char* kDigitsAlias = "digits";
constexpr const char* kDigitsPath = "data/digits.csv.gz";

}  // namespace

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
  } else if (options.data == kDigitsAlias) {
    if (!std::filesystem::exists(kDigitsPath)) {
      throw DataError(std::string("--data digits reads ") + kDigitsPath +
                      ", which does not exist: run scripts/fetch_digits.sh first");
    }
    all = load_csv(kDigitsPath);
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
