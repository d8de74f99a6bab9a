#pragma once
// Dataset files: CSV (plain or gzip, told apart by content) and NumPy .npy. Each row is the
// features plus one integer label column. Anything malformed is refused with a DataError that
// names the file, the line (or header field) and the reason; nothing is silently skipped.
#include <cstdint>
#include <string>

#include "trainer/dataset.hpp"

namespace ddp::trainer {

struct LoadOptions {
  // Column holding the class label; negative counts from the end (-1 = last column).
  int label_column = -1;
};

// Loads a CSV file. Blank lines are ignored; a first line made only of non-numeric fields is
// a header. Labels must be non-negative integers (written "3" or "3.0").
Dataset load_csv(const std::string& path, const LoadOptions& options = {});

// Loads a 2-D little-endian .npy array (float32/64, int8..64, uint8..64; C or Fortran order).
Dataset load_npy(const std::string& path, const LoadOptions& options = {});

// The index of options.label_column in a table of `columns` columns (negative counts from the
// end). DataError naming `where` unless there are at least 2 columns and the label column
// exists; `unit` says what the table is ("a row", "an array") in that message.
std::size_t resolve_label_column(const LoadOptions& options, std::size_t columns,
                                 const std::string& where, const std::string& unit);

// Picks the loader by file name: *.npy -> load_npy, anything else (e.g. .csv, .csv.gz) -> load_csv.
Dataset load_dataset(const std::string& path, const LoadOptions& options = {});

struct SyntheticOptions {
  std::size_t rows = 4096;
  std::size_t num_features = 64;
  int num_classes = 10;
  uint64_t seed = 1;
  // Distance between class centres in units of the per-sample noise; higher is easier.
  double separation = 6.0;
};

// Gaussian blobs, one centre per class; the same seed gives the same bytes everywhere.
Dataset make_synthetic(const SyntheticOptions& options);

}  // namespace ddp::trainer
