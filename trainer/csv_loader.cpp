// CSV loading (gzip or plain, via zlib's transparent reader).
#include <zlib.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <limits>
#include <memory>
#include <string_view>

#include "common/error.hpp"
#include "trainer/data_loaders.hpp"

namespace ddp::trainer {
namespace {

// Largest class count we accept: a stray value like 1e9 in the label column would
// otherwise ask for a billion-wide output layer.
constexpr int64_t kMaxClasses = 1 << 20;

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};

// The whole file, decompressed when it is gzip, as-is otherwise.
std::string read_all(const std::string& path) {
  errno = 0;
  std::unique_ptr<gzFile_s, GzCloser> file(gzopen(path.c_str(), "rb"));
  if (!file) {
    throw DataError(path + ": cannot open: " + errno_text(errno == 0 ? ENOENT : errno));
  }
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const int n = gzread(file.get(), buf, sizeof(buf));
    if (n < 0) {
      int code = 0;
      const char* msg = gzerror(file.get(), &code);
      throw DataError(path + ": read failed after " + std::to_string(out.size()) +
                      " bytes: " + (code == Z_ERRNO ? errno_text(errno) : std::string(msg)));
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

bool parse_double(std::string_view s, double& out) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size() && !s.empty();
}

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = line.find(',', start);
    fields.push_back(trim(line.substr(start, comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return fields;
}

std::string quoted(std::string_view s) {
  constexpr std::size_t kMaxShown = 40;
  return "'" + std::string(s.substr(0, kMaxShown)) + (s.size() > kMaxShown ? "...'" : "'");
}

}  // namespace

Dataset load_csv(const std::string& path, const LoadOptions& options) {
  const std::string text = read_all(path);
  Dataset data;
  std::size_t columns = 0;
  std::size_t label_col = 0;
  bool first = true;
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    const std::string_view line =
        std::string_view(text).substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? text.size() : nl + 1;
    ++line_no;
    if (trim(line).empty()) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    const auto fields = split_fields(line);
    if (first) {
      first = false;
      columns = fields.size();
      label_col = resolve_label_column(options, columns, where, "a row");
      data.num_features = columns - 1;
      bool any_number = false;
      for (const auto f : fields) {
        double ignored = 0;
        any_number = any_number || parse_double(f, ignored);
      }
      if (!any_number) continue;  // a header line
    }
    if (fields.size() != columns) {
      throw DataError(where + ": found " + std::to_string(fields.size()) + " columns, expected " +
                      std::to_string(columns) + " like the first row");
    }
    for (std::size_t c = 0; c < columns; ++c) {
      double v = 0;
      if (!parse_double(fields[c], v) || !std::isfinite(v)) {
        throw DataError(where + ": column " + std::to_string(c + 1) + " is " + quoted(fields[c]) +
                        ", expected a finite number");
      }
      if (c == label_col) {
        if (v < 0 || v != std::floor(v) || v >= static_cast<double>(kMaxClasses)) {
          throw DataError(where + ": label (column " + std::to_string(c + 1) + ") is " +
                          quoted(fields[c]) + ", expected an integer in [0, " +
                          std::to_string(kMaxClasses) + ")");
        }
        data.labels.push_back(static_cast<int32_t>(v));
        data.num_classes = std::max(data.num_classes, static_cast<int>(v) + 1);
      } else {
        if (std::fabs(v) > static_cast<double>(std::numeric_limits<float>::max())) {
          throw DataError(where + ": column " + std::to_string(c + 1) + " is " + quoted(fields[c]) +
                          ", out of float range");
        }
        data.features.push_back(static_cast<float>(v));
      }
    }
  }
  if (data.rows() == 0) throw DataError(path + ": no data rows (empty file or header only)");
  validate(data, path);
  return data;
}

std::size_t resolve_label_column(const LoadOptions& options, std::size_t columns,
                                 const std::string& where, const std::string& unit) {
  if (columns < 2) {
    throw DataError(where + ": found " + std::to_string(columns) +
                    " column, expected at least 2 (features and a label)");
  }
  const auto signed_cols = static_cast<int64_t>(columns);
  const int64_t col =
      options.label_column < 0 ? signed_cols + options.label_column : options.label_column;
  if (col < 0 || col >= signed_cols) {
    throw DataError(where + ": label column " + std::to_string(options.label_column) +
                    " does not exist in " + unit + " of " + std::to_string(columns) + " columns");
  }
  return static_cast<std::size_t>(col);
}

Dataset load_dataset(const std::string& path, const LoadOptions& options) {
  constexpr std::string_view kNpy = ".npy";
  if (path.size() >= kNpy.size() && path.ends_with(kNpy)) return load_npy(path, options);
  return load_csv(path, options);
}

}  // namespace ddp::trainer
