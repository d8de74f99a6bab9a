#include "worker_runtime/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

#include "common/error.hpp"
#include "common/fd.hpp"
#include "worker_runtime/checkpoint_temp.hpp"

namespace ddp::worker_runtime {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; this writer copies memory as is");

constexpr const char* kStateKey = "ddp_training_state";
constexpr const char* kCrcKey = "ddp_crc32";
constexpr uint64_t kMaxHeaderBytes = 100ULL * 1024 * 1024;  // safetensors' own limit

void write_all(int fd, const void* data, size_t size, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      throw CheckpointError("writing checkpoint " + path + " failed: " + errno_text(errno));
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

// Writes the chunks to path atomically: a locked temp file in the same directory (stale ones
// of dead writers removed first), fsync, rename over path (the old file stays whole until
// then), fsync of the directory so the rename persists.
void write_atomically(const std::string& path,
                      const std::vector<std::pair<const void*, size_t>>& chunks) {
  remove_stale_checkpoint_temps(path);
  const std::string tmp = checkpoint_temp_path(path);
  Fd fd(open_checkpoint_temp(tmp));
  try {
    for (const auto& [data, size] : chunks) {
      write_all(fd.get(), data, size, tmp);
    }
    if (::fsync(fd.get()) != 0) {
      throw CheckpointError("fsync of " + tmp + " failed: " + errno_text(errno));
    }
    if (fd.close() != 0) {
      throw CheckpointError("close of " + tmp + " failed: " + errno_text(errno));
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      throw CheckpointError("rename " + tmp + " -> " + path + " failed: " + errno_text(errno));
    }
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  const Fd dir_fd(::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd) {
    ::fsync(dir_fd.get());  // best effort: some filesystems refuse fsync on directories
  }
}

nlohmann::json state_to_json(const TrainingState& s) {
  return {{"epoch", s.epoch},
          {"position_in_epoch", s.position_in_epoch},
          {"global_step", s.global_step},
          {"world_size", s.world_size},
          {"seed", s.seed},
          {"optimizer", s.optimizer},
          {"extra", s.extra}};
}

// j[key] as T: an integer in T's range. nlohmann's get<T>() casts 1e300 or 2^40 as they
// come, which is undefined (float) or wraps silently (int).
template <class T>
T integer_field(const nlohmann::json& j, const char* key, const std::string& path) {
  const auto& v = j.at(key);
  bool fits = false;
  if (v.is_number_unsigned()) {
    fits = v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
  } else if (v.is_number_integer()) {
    const auto i = v.get<int64_t>();
    fits = std::in_range<T>(i);
  }
  if (!fits) {
    throw CheckpointError("checkpoint " + path + ": training state is malformed: " + key + " is " +
                          v.dump() + ", expected an integer");
  }
  return v.get<T>();
}

TrainingState state_from_json(const nlohmann::json& j, const std::string& path) {
  try {
    TrainingState s;
    s.epoch = integer_field<int64_t>(j, "epoch", path);
    s.position_in_epoch = integer_field<int64_t>(j, "position_in_epoch", path);
    s.global_step = integer_field<int64_t>(j, "global_step", path);
    s.world_size = integer_field<int>(j, "world_size", path);
    s.seed = integer_field<uint64_t>(j, "seed", path);
    s.optimizer = j.value("optimizer", nlohmann::json::object());
    s.extra = j.value("extra", nlohmann::json::object());
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError("checkpoint " + path + ": training state is malformed: " + e.what());
  }
}

// A JSON array of integers, for shapes and offsets: a float such as 1e300 is refused (its
// conversion to an integer type is undefined), as is a negative number for an unsigned T.
template <typename T>
std::vector<T> integer_array(const nlohmann::json& v, const std::string& what) {
  if (!v.is_array()) throw CheckpointError(what + " is " + v.dump() + ", expected an array");
  std::vector<T> out;
  out.reserve(v.size());
  for (const auto& e : v) {
    if (!e.is_number_integer() || (std::is_unsigned_v<T> && !e.is_number_unsigned())) {
      throw CheckpointError(what + " holds " + e.dump() + ", expected " +
                            (std::is_unsigned_v<T> ? "integers >= 0" : "integers"));
    }
    out.push_back(e.get<T>());
  }
  return out;
}

// The number of elements of shape; -1 when a dimension is negative or the tensor's bytes
// would not fit in int64 (a forged shape must not overflow the size checks).
int64_t element_count(const std::vector<int64_t>& shape) {
  constexpr int64_t kMaxElements = std::numeric_limits<int64_t>::max() / sizeof(float);
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > kMaxElements / d)) {
      return -1;
    }
    n *= d;
  }
  return n;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return out + "]";
}

}  // namespace

void save_checkpoint(const std::string& path, const std::vector<TensorRef>& tensors,
                     const TrainingState& state) {
  nlohmann::json header = nlohmann::json::object();
  std::set<std::string> names;
  uint64_t offset = 0;
  uLong crc = crc32(0L, Z_NULL, 0);
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !names.insert(t.name).second) {
      throw CheckpointError("checkpoint " + path + ": tensor name '" + t.name +
                            "' is empty, reserved or used twice");
    }
    if (element_count(t.shape) != static_cast<int64_t>(t.data.size())) {
      throw CheckpointError("checkpoint " + path + ": tensor '" + t.name + "' has shape " +
                            shape_text(t.shape) + " but " + std::to_string(t.data.size()) +
                            " elements");
    }
    const uint64_t bytes = t.data.size_bytes();
    header[t.name] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    if (bytes > 0) {
      crc = crc32_z(crc, reinterpret_cast<const Bytef*>(t.data.data()), bytes);
    }
  }
  const std::string state_json = state_to_json(state).dump();
  header["__metadata__"] = {
      {"format", "pt"}, {kStateKey, state_json}, {kCrcKey, std::to_string(crc)}};
  std::string header_text = header.dump();
  // Pad with spaces to 8 bytes, as the safetensors writer does, so the data stays aligned.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  const uint64_t header_len = header_text.size();

  std::vector<std::pair<const void*, size_t>> chunks;
  chunks.emplace_back(&header_len, sizeof(header_len));
  chunks.emplace_back(header_text.data(), header_text.size());
  for (const auto& t : tensors) {
    chunks.emplace_back(t.data.data(), t.data.size_bytes());
  }
  write_atomically(path, chunks);
  // The human-readable copy; the weights file's embedded copy is the one loads trust.
  const std::string pretty = state_to_json(state).dump(2) + "\n";
  write_atomically(path + ".json", {{pretty.data(), pretty.size()}});
}

Checkpoint load_checkpoint(const std::string& path) {
  remove_stale_checkpoint_temps(path);
  remove_stale_checkpoint_temps(path + ".json");
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    throw CheckpointError("cannot open checkpoint " + path + ": " + errno_text(errno));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    throw CheckpointError("cannot stat checkpoint " + path + ": " + errno_text(errno));
  }
  const auto file_size = static_cast<uint64_t>(st.st_size);
  std::string bytes(file_size, '\0');
  size_t got = 0;
  while (got < file_size) {
    const ssize_t n = ::read(fd.get(), bytes.data() + got, file_size - got);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      throw CheckpointError("reading checkpoint " + path + " failed at byte " +
                            std::to_string(got) + ": " +
                            (n < 0 ? errno_text(errno) : "unexpected end of file"));
    }
    got += static_cast<size_t>(n);
  }
  if (file_size < 8) {
    throw CheckpointError("checkpoint " + path + " is truncated: " + std::to_string(file_size) +
                          " bytes, expected at least the 8-byte header length");
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > kMaxHeaderBytes || header_len > file_size - 8) {
    throw CheckpointError(
        "checkpoint " + path + " is truncated or not safetensors: header length " +
        std::to_string(header_len) + " but the file has " + std::to_string(file_size) + " bytes");
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 8,
                                   bytes.begin() + 8 + static_cast<std::ptrdiff_t>(header_len));
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError("checkpoint " + path + " has a corrupt header: " + e.what());
  }
  if (!header.is_object()) {
    throw CheckpointError("checkpoint " + path + " has a corrupt header: not a JSON object");
  }
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file_size - data_start;
  const char* data = bytes.data() + data_start;

  Checkpoint out;
  uint64_t covered = 0;
  try {
    for (const auto& [name, info] : header.items()) {
      if (name == "__metadata__") {
        continue;
      }
      const auto dtype = info.at("dtype").get<std::string>();
      if (dtype != "F32") {
        throw CheckpointError("checkpoint " + path + ": tensor '" + name + "' has dtype " + dtype +
                              ", expected F32");
      }
      LoadedTensor t;
      std::string entry = "checkpoint ";
      entry.append(path).append(": tensor '").append(name).append("'");
      t.shape = integer_array<int64_t>(info.at("shape"), entry + " shape");
      const auto offsets =
          integer_array<uint64_t>(info.at("data_offsets"), entry + " data_offsets");
      const int64_t count = element_count(t.shape);
      if (offsets.size() != 2 || offsets[0] > offsets[1] || count < 0 ||
          offsets[1] - offsets[0] != static_cast<uint64_t>(count) * sizeof(float)) {
        throw CheckpointError("checkpoint " + path + ": tensor '" + name + "' has shape " +
                              shape_text(t.shape) + " and offsets that do not match it");
      }
      if (offsets[1] > data_size) {
        throw CheckpointError("checkpoint " + path + " is truncated: tensor '" + name +
                              "' ends at data byte " + std::to_string(offsets[1]) + " but only " +
                              std::to_string(data_size) + " data bytes remain");
      }
      t.data.resize(static_cast<size_t>(count));
      std::memcpy(t.data.data(), data + offsets[0], offsets[1] - offsets[0]);
      covered += offsets[1] - offsets[0];
      out.tensors.emplace(name, std::move(t));
    }
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError("checkpoint " + path + " has a malformed tensor entry: " + e.what());
  }
  if (covered != data_size) {
    throw CheckpointError("checkpoint " + path + ": tensors cover " + std::to_string(covered) +
                          " data bytes but the file holds " + std::to_string(data_size));
  }
  const auto meta = header.value("__metadata__", nlohmann::json::object());
  if (meta.contains(kCrcKey) && !meta.at(kCrcKey).is_string()) {
    throw CheckpointError("checkpoint " + path + " has a malformed header: " + kCrcKey + " is " +
                          meta.at(kCrcKey).dump() + ", expected a string");
  }
  if (meta.contains(kCrcKey)) {
    uLong crc = crc32(0L, Z_NULL, 0);
    // Same order as written: by offset. Data is contiguous, so one pass over the region.
    if (data_size > 0) {
      crc = crc32_z(crc, reinterpret_cast<const Bytef*>(data), data_size);
    }
    if (std::to_string(crc) != meta.at(kCrcKey).get<std::string>()) {
      throw CheckpointError("checkpoint " + path + " is corrupt: CRC-32 of the tensor data is " +
                            std::to_string(crc) + ", the header says " +
                            meta.at(kCrcKey).get<std::string>());
    }
  }
  if (meta.contains(kStateKey)) {
    try {
      out.state =
          state_from_json(nlohmann::json::parse(meta.at(kStateKey).get<std::string>()), path);
    } catch (const nlohmann::json::exception& e) {
      throw CheckpointError("checkpoint " + path + ": training state is not JSON: " + e.what());
    }
  }
  return out;
}

void restore_tensor(const Checkpoint& ckpt, const std::string& name,
                    const std::vector<int64_t>& expected_shape, std::span<float> dst) {
  auto it = ckpt.tensors.find(name);
  if (it == ckpt.tensors.end()) {
    throw CheckpointError("checkpoint has no tensor '" + name + "' (it holds " +
                          std::to_string(ckpt.tensors.size()) + " tensors)");
  }
  if (it->second.shape != expected_shape || dst.size() != it->second.data.size()) {
    throw CheckpointError("checkpoint tensor '" + name + "' has shape " +
                          shape_text(it->second.shape) + ", the model expects " +
                          shape_text(expected_shape));
  }
  std::copy(it->second.data.begin(), it->second.data.end(), dst.begin());
}

void save_checkpoint_on_rank0(ProcessGroup& group, const std::string& path,
                              const std::vector<TensorRef>& tensors, const TrainingState& state) {
  int64_t status = 0;
  std::string error;
  if (group.rank() == 0) {
    try {
      save_checkpoint(path, tensors, state);
    } catch (const std::exception& e) {
      status = 1;
      error = e.what();
    }
  }
  group.broadcast(std::span<int64_t>(&status, 1), 0);
  if (status != 0) {
    throw CheckpointError(group.rank() == 0 ? error
                                            : "rank 0 failed to write checkpoint " + path +
                                                  " (its log has the reason)");
  }
}

}  // namespace ddp::worker_runtime
