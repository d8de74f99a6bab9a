// NumPy .npy loading: a 2-D array whose label column holds non-negative integers.
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string_view>

#include "common/error.hpp"
#include "trainer/data_loaders.hpp"

namespace ddp::trainer {
namespace {

static_assert(std::endian::native == std::endian::little,
              ".npy reader assumes a little-endian host");

struct NpyHeader {
  char kind = 0;  // 'f' float, 'i' signed, 'u' unsigned
  std::size_t item_size = 0;
  bool fortran_order = false;
  std::vector<std::size_t> shape;
};

// The value of 'key' in the header dict, up to the next top-level ',' or '}'.
std::string_view dict_value(std::string_view dict, std::string_view key, const std::string& path) {
  const std::string quoted_key = "'" + std::string(key) + "'";
  const std::size_t k = dict.find(quoted_key);
  const std::size_t colon = k == std::string_view::npos ? k : dict.find(':', k);
  if (colon == std::string_view::npos) {
    throw DataError(path + ": .npy header has no " + quoted_key + " entry: " + std::string(dict));
  }
  std::size_t end = colon + 1;
  int depth = 0;
  while (end < dict.size()) {
    const char c = dict[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
    ++end;
  }
  std::string_view v = dict.substr(colon + 1, end - colon - 1);
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
  return v;
}

NpyHeader parse_header(std::string_view dict, const std::string& path) {
  NpyHeader h;
  std::string_view descr = dict_value(dict, "descr", path);
  if (descr.size() < 5 || descr.front() != '\'' || descr.back() != '\'') {
    throw DataError(path + ": .npy descr " + std::string(descr) + " is not a simple dtype");
  }
  descr = descr.substr(1, descr.size() - 2);  // e.g. <f4
  const char order = descr[0];
  h.kind = descr[1];
  h.item_size = static_cast<std::size_t>(std::atoi(std::string(descr.substr(2)).c_str()));
  const bool size_ok = h.item_size == 1 || h.item_size == 2 || h.item_size == 4 || h.item_size == 8;
  const bool kind_ok = (h.kind == 'f' && (h.item_size == 4 || h.item_size == 8)) ||
                       ((h.kind == 'i' || h.kind == 'u') && size_ok);
  const bool order_ok = order == '<' || order == '|' || (order == '=' && h.item_size == 1);
  if (!kind_ok || !order_ok) {
    throw DataError(path + ": .npy dtype '" + std::string(descr) +
                    "' is not supported, expected little-endian float32/64 or (u)int8..64");
  }
  const std::string_view fortran = dict_value(dict, "fortran_order", path);
  h.fortran_order = fortran == "True";
  std::string_view shape = dict_value(dict, "shape", path);
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')') {
    throw DataError(path + ": .npy shape " + std::string(shape) + " is not a tuple");
  }
  shape = shape.substr(1, shape.size() - 2);
  while (!shape.empty()) {
    const std::size_t comma = shape.find(',');
    std::string_view item = shape.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    if (!item.empty()) h.shape.push_back(std::stoull(std::string(item)));
    if (comma == std::string_view::npos) break;
    shape.remove_prefix(comma + 1);
  }
  if (h.shape.size() != 2) {
    throw DataError(path + ": .npy array has " + std::to_string(h.shape.size()) +
                    " dimensions, expected 2 (rows, features + label)");
  }
  return h;
}

double read_item(const char* p, const NpyHeader& h) {
  auto get = [p]<typename T>(T) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return static_cast<double>(v);
  };
  if (h.kind == 'f') return h.item_size == 4 ? get(float{}) : get(double{});
  if (h.kind == 'i') {
    switch (h.item_size) {
      case 1:
        return get(int8_t{});
      case 2:
        return get(int16_t{});
      case 4:
        return get(int32_t{});
      default:
        return get(int64_t{});
    }
  }
  switch (h.item_size) {
    case 1:
      return get(uint8_t{});
    case 2:
      return get(uint16_t{});
    case 4:
      return get(uint32_t{});
    default:
      return get(uint64_t{});
  }
}

}  // namespace

Dataset load_npy(const std::string& path, const LoadOptions& options) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw DataError(path + ": cannot open: " + errno_text(errno));
  std::string bytes(static_cast<std::size_t>(in.tellg()), '\0');
  in.seekg(0);
  if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) {
    throw DataError(path + ": read failed: " + errno_text(errno));
  }
  constexpr std::string_view kMagic("\x93NUMPY", 6);
  if (bytes.size() < 10 || std::string_view(bytes).substr(0, 6) != kMagic) {
    throw DataError(path + ": not a .npy file (missing the \\x93NUMPY magic)");
  }
  const auto major = static_cast<uint8_t>(bytes[6]);
  std::size_t header_len = 0;
  std::size_t offset = 0;
  if (major == 1) {
    header_len = static_cast<uint8_t>(bytes[8]) |
                 (static_cast<std::size_t>(static_cast<uint8_t>(bytes[9])) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw DataError(path + ": .npy header truncated");
    uint32_t len = 0;
    std::memcpy(&len, bytes.data() + 8, 4);
    header_len = len;
    offset = 12;
  } else {
    throw DataError(path + ": .npy format version " + std::to_string(major) +
                    " is not supported, expected 1, 2 or 3");
  }
  if (offset + header_len > bytes.size()) {
    throw DataError(path + ": .npy header length " + std::to_string(header_len) +
                    " runs past the end of the " + std::to_string(bytes.size()) + "-byte file");
  }
  const NpyHeader h = parse_header(std::string_view(bytes).substr(offset, header_len), path);
  offset += header_len;
  const std::size_t rows = h.shape[0];
  const std::size_t cols = h.shape[1];
  const std::size_t expected = rows * cols * h.item_size;
  if (bytes.size() - offset != expected) {
    throw DataError(path + ": .npy data is " + std::to_string(bytes.size() - offset) +
                    " bytes, expected " + std::to_string(expected) + " for shape (" +
                    std::to_string(rows) + ", " + std::to_string(cols) + ")");
  }
  const std::size_t label_col = resolve_label_column(options, cols, path, "an array");
  Dataset data;
  data.num_features = cols - 1;
  data.features.reserve(rows * data.num_features);
  data.labels.reserve(rows);
  const char* base = bytes.data() + offset;
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) {
      const std::size_t index = h.fortran_order ? c * rows + r : r * cols + c;
      const double v = read_item(base + index * h.item_size, h);
      const std::string where =
          path + ": row " + std::to_string(r) + ", column " + std::to_string(c);
      if (!std::isfinite(v)) throw DataError(where + " is not a finite number");
      if (c == label_col) {
        if (v < 0 || v != std::floor(v) || v >= (1 << 20)) {
          throw DataError(where + ": label " + std::to_string(v) +
                          ", expected a non-negative integer below 2^20");
        }
        data.labels.push_back(static_cast<int32_t>(v));
        data.num_classes = std::max(data.num_classes, static_cast<int>(v) + 1);
      } else {
        data.features.push_back(static_cast<float>(v));
      }
    }
  }
  validate(data, path);
  return data;
}

}  // namespace ddp::trainer
