#include "rendezvous/store/wire_codec.hpp"

#include <array>
#include <cstring>
#include <optional>

#include "common/error.hpp"

namespace ddp::rendezvous::wire {
namespace {

constexpr uint8_t kLegacyNone = 0xFF;

// Wire bytes per Command, indexed by the enum's value.
constexpr size_t kCommands = 26;
constexpr uint8_t kNo = kLegacyNone;
// clang-format off
// Columns: VALIDATE SET COMPARE_SET GET ADD CHECK WAIT GETNUMKEYS WATCH_KEY DELETE_KEY APPEND
// MULTI_GET MULTI_SET CANCEL_WAIT PING ON_CLOSE EPHEMERAL CLEAR_CLOSE_ACTIONS AUTH_CHALLENGE
// AUTH_PROOF WORKER_NAMESPACE QUEUE_PUSH QUEUE_POP QUEUE_LEN LIST_KEYS BARRIER.
constexpr std::array<uint8_t, kCommands> kV2Bytes = {
    0, 1, 2, 3, 4, 5, 6, 7, kNo, 8, 9, 10, 11, 12, 13, kNo, kNo, kNo, kNo, kNo, kNo,
    14, 15, 16, 17, 18};
constexpr std::array<uint8_t, kCommands> kNativeBytes = {
    0, 1, 2, 3, 4, 5, 6, 7, kNo, 8, 9, 10, 11, 12, 13, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45,
    14, 15, 16, 17, 18};
constexpr std::array<uint8_t, kCommands> kLegacyBytes = {
    kNo, 0, 1, 2, 3, 4, 5, 6, 7, 8, kNo, kNo, kNo, kNo, kNo, kNo, kNo, kNo, kNo, kNo, kNo,
    kNo, kNo, kNo, kNo, kNo};
constexpr std::array<uint8_t, kCommands> kLegacy21Bytes = {
    kNo, 0, 1, 2, 3, 4, 5, 6, kNo, 7, 8, 9, 10, 11, kNo, kNo, kNo, kNo, kNo, kNo, kNo,
    kNo, kNo, kNo, kNo, kNo};
// clang-format on
constexpr std::array<const char*, kCommands> kNames = {"VALIDATE",
                                                       "SET",
                                                       "COMPARE_SET",
                                                       "GET",
                                                       "ADD",
                                                       "CHECK",
                                                       "WAIT",
                                                       "GETNUMKEYS",
                                                       "WATCH_KEY",
                                                       "DELETE_KEY",
                                                       "APPEND",
                                                       "MULTI_GET",
                                                       "MULTI_SET",
                                                       "CANCEL_WAIT",
                                                       "PING",
                                                       "ON_CLOSE",
                                                       "EPHEMERAL",
                                                       "CLEAR_CLOSE_ACTIONS",
                                                       "AUTH_CHALLENGE",
                                                       "AUTH_PROOF",
                                                       "WORKER_NAMESPACE",
                                                       "QUEUE_PUSH",
                                                       "QUEUE_POP",
                                                       "QUEUE_LEN",
                                                       "LIST_KEYS",
                                                       "BARRIER"};

const std::array<uint8_t, kCommands>& byte_table(Dialect dialect) {
  switch (dialect) {
    case Dialect::kV2:
      return kV2Bytes;
    case Dialect::kNative:
      return kNativeBytes;
    case Dialect::kLegacy21:
      return kLegacy21Bytes;
    default:
      return kLegacyBytes;
  }
}

std::optional<Command> command_from_byte(uint8_t byte, Dialect dialect) {
  const auto& table = byte_table(dialect);
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i] == byte && byte != kLegacyNone) return static_cast<Command>(i);
  }
  return std::nullopt;
}

// Walks one frame. With out == nullptr it only validates and measures (no copies), so a
// large frame arriving in pieces is re-scanned cheaply; the copying pass runs once.
class FrameReader {
 public:
  FrameReader(std::string_view bytes, const Limits& limits, Request* out)
      : bytes_(bytes), limits_(limits), out_(out) {}

  // false: not enough bytes (needed_ says how many in total) or bad (error_ set).
  bool u8(uint8_t& v) {
    if (!have(1)) return false;
    v = static_cast<uint8_t>(bytes_[pos_]);
    pos_ += 1;
    return true;
  }
  bool u32(uint32_t& v) {
    if (!have(4)) return false;
    v = get_u32(bytes_.data() + pos_);
    pos_ += 4;
    return true;
  }
  bool u64(uint64_t& v) {
    if (!have(8)) return false;
    v = get_u64(bytes_.data() + pos_);
    pos_ += 8;
    return true;
  }
  // A length-prefixed string of at most max bytes, appended to dest when copying.
  bool string(std::vector<std::string>* dest, size_t max, const char* what) {
    uint64_t len = 0;
    if (!u64(len)) return false;
    if (len > max) {
      error_ = std::string(what) + " length " + std::to_string(len) + " exceeds the limit of " +
               std::to_string(max) + " bytes";
      return false;
    }
    if (!have(static_cast<size_t>(len))) return false;
    if (out_ != nullptr && dest != nullptr) dest->emplace_back(bytes_.data() + pos_, len);
    pos_ += static_cast<size_t>(len);
    return true;
  }
  bool key() { return string(out_ ? &out_->keys : nullptr, limits_.max_key_bytes, "key"); }
  bool value() { return string(out_ ? &out_->values : nullptr, limits_.max_value_bytes, "value"); }
  bool count(uint64_t& n) {
    if (!u64(n)) return false;
    if (n > limits_.max_keys_per_request) {
      error_ = "key count " + std::to_string(n) + " exceeds the limit of " +
               std::to_string(limits_.max_keys_per_request) + " keys per request";
      return false;
    }
    if (out_ != nullptr) out_->keys.reserve(static_cast<size_t>(n));
    return true;
  }

  // After a scan stopped for want of bytes: the frame holds at least `bytes` more (the length
  // prefixes of the items not reached yet), so the hint covers them too and a 16k-key frame
  // arriving in 2 KiB pieces is re-scanned a few dozen times, not once per piece.
  void expect_more(uint64_t bytes) {
    if (error_.empty()) needed_ += static_cast<size_t>(bytes);
  }

  [[nodiscard]] size_t pos() const { return pos_; }
  [[nodiscard]] size_t needed() const { return needed_; }
  [[nodiscard]] const std::string& error() const { return error_; }
  void fail(std::string error) { error_ = std::move(error); }

 private:
  bool have(size_t n) {
    if (bytes_.size() - pos_ >= n) return true;
    needed_ = pos_ + n;
    return false;
  }

  std::string_view bytes_;
  const Limits& limits_;
  Request* out_;
  size_t pos_ = 0;
  size_t needed_ = 0;
  std::string error_;
};

// Every key and value is preceded by its length.
constexpr uint64_t kLengthBytes = 8;

// Reads the arguments of command (after its byte). false: need more or bad.
bool read_body(FrameReader& r, Command command, Request* out) {
  switch (command) {
    case Command::kValidate:
    case Command::kPing: {
      uint32_t v = 0;
      if (!r.u32(v)) return false;
      if (out) out->nonce = v;
      return true;
    }
    case Command::kSet:
    case Command::kAppend:
    case Command::kOnClose:
    case Command::kEphemeral:
    case Command::kAuthProof:
    case Command::kQueuePush:
      return r.key() && r.value();
    case Command::kCompareSet:
      return r.key() && r.value() && r.value();
    case Command::kGet:
    case Command::kDeleteKey:
    case Command::kWatchKey:
    case Command::kWorkerNamespace:
    case Command::kQueuePop:
    case Command::kQueueLen:
      return r.key();
    case Command::kAdd:
    case Command::kBarrier: {
      uint64_t v = 0;
      if (!r.key() || !r.u64(v)) return false;
      if (out) out->delta = static_cast<int64_t>(v);
      return true;
    }
    case Command::kCheck:
    case Command::kWait:
    case Command::kMultiGet: {
      uint64_t n = 0;
      if (!r.count(n)) return false;
      for (uint64_t i = 0; i < n; ++i) {
        if (!r.key()) {
          r.expect_more(kLengthBytes * (n - i - 1));
          return false;
        }
      }
      return true;
    }
    case Command::kMultiSet: {
      uint64_t n = 0;
      if (!r.count(n)) return false;
      if (out) out->values.reserve(static_cast<size_t>(n));
      for (uint64_t i = 0; i < n; ++i) {
        if (!r.key()) {
          r.expect_more(kLengthBytes * (2 * (n - i) - 1));
          return false;
        }
        if (!r.value()) {
          r.expect_more(kLengthBytes * 2 * (n - i - 1));
          return false;
        }
      }
      return true;
    }
    case Command::kGetNumKeys:
    case Command::kCancelWait:
    case Command::kClearCloseActions:
    case Command::kAuthChallenge:
    case Command::kListKeys:
      return true;
  }
  return true;
}

}  // namespace

DetectResult detect_dialect(std::string_view bytes) {
  DetectResult result;
  if (bytes.empty()) return result;
  if (bytes[0] != 0) {
    // Legacy dialect: any first byte but SET (0) rules the handshake out at once.
    result.status = ParseStatus::kComplete;
    result.dialect = Dialect::kLegacy;
    return result;
  }
  if (bytes.size() < kHandshakeBytes) return result;
  result.status = ParseStatus::kComplete;
  if (get_u32(bytes.data() + 1) == kValidationMagic) {
    result.dialect = Dialect::kV2;
    result.consumed = kHandshakeBytes;
  } else {
    // A legacy SET; its key length's low word is not the magic (that would be ~1 GB).
    result.dialect = Dialect::kLegacy;
  }
  return result;
}

DetectResult refine_legacy(std::string_view bytes, LegacyRole role) {
  DetectResult result;
  result.dialect = Dialect::kLegacy;
  if (bytes.empty()) return result;
  result.status = ParseStatus::kComplete;
  switch (static_cast<uint8_t>(bytes[0])) {
    case 7:
      if (role == LegacyRole::kMain) result.dialect = Dialect::kLegacy21;
      break;
    case 8: {
      // DELETE_KEY (1.13/2.0) or APPEND (2.1): both open with a key; only APPEND has more.
      if (bytes.size() < 1 + kLengthBytes) {
        result.status = ParseStatus::kNeedMore;
        break;
      }
      const uint64_t key_bytes = get_u64(bytes.data() + 1);
      if (key_bytes > bytes.size() - 1 - kLengthBytes) {
        result.status = ParseStatus::kNeedMore;  // a forged length is refused by the parser
        break;
      }
      if (bytes.size() > 1 + kLengthBytes + key_bytes) result.dialect = Dialect::kLegacy21;
      break;
    }
    case 9:
    case 10:
    case 11:
      result.dialect = Dialect::kLegacy21;
      break;
    default:
      break;
  }
  return result;
}

ParseResult parse_request(std::string_view bytes, Dialect dialect, const Limits& limits) {
  ParseResult result;
  if (bytes.empty()) {
    result.needed = 1;
    return result;
  }
  const auto byte = static_cast<uint8_t>(bytes[0]);
  const auto command = command_from_byte(byte, dialect);
  if (!command) {
    result.status = ParseStatus::kBad;
    result.error =
        "unknown command byte " + std::to_string(byte) + " (" + dialect_name(dialect) + " dialect)";
    return result;
  }
  FrameReader scan(bytes.substr(1), limits, nullptr);
  if (!read_body(scan, *command, nullptr)) {
    if (!scan.error().empty()) {
      result.status = ParseStatus::kBad;
      result.error = std::string(command_name(*command)) + ": " + scan.error();
    } else {
      result.needed = 1 + scan.needed();
    }
    return result;
  }
  result.request.command = *command;
  FrameReader copy(bytes.substr(1), limits, &result.request);
  read_body(copy, *command, &result.request);
  result.status = ParseStatus::kComplete;
  result.consumed = 1 + copy.pos();
  return result;
}

int command_byte(Command command, Dialect dialect) {
  const auto idx = static_cast<size_t>(command);
  const uint8_t b = byte_table(dialect).at(idx);
  return b == kLegacyNone ? -1 : b;
}

const char* command_name(Command command) {
  return kNames.at(static_cast<size_t>(command));
}

const char* dialect_name(Dialect dialect) {
  switch (dialect) {
    case Dialect::kV2:
      return "2.2+";
    case Dialect::kNative:
      return "2.2+ddplaunch";
    case Dialect::kLegacy:
      return "1.13/2.0";
    case Dialect::kLegacy21:
      return "2.1";
    case Dialect::kUnknown:
      break;
  }
  return "unknown";
}

void put_u8(std::string& out, uint8_t v) {
  out.push_back(static_cast<char>(v));
}
void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_i64(std::string& out, int64_t v) {
  put_u64(out, static_cast<uint64_t>(v));
}
void put_string(std::string& out, std::string_view s) {
  put_u64(out, s.size());
  out.append(s);
}

std::string encode_request(const Request& request, Dialect dialect) {
  const int byte = command_byte(request.command, dialect);
  if (byte < 0) {
    throw ProtocolError(std::string("command ") + command_name(request.command) +
                        " does not exist in the " + dialect_name(dialect) + " dialect");
  }
  std::string out;
  put_u8(out, static_cast<uint8_t>(byte));
  const auto& k = request.keys;
  const auto& v = request.values;
  auto need = [&](size_t nk, size_t nv) {
    if (k.size() < nk || v.size() < nv) {
      throw ProtocolError(std::string("encode ") + command_name(request.command) + ": needs " +
                          std::to_string(nk) + " keys and " + std::to_string(nv) + " values");
    }
  };
  switch (request.command) {
    case Command::kValidate:
    case Command::kPing:
      put_u32(out, request.nonce);
      break;
    case Command::kSet:
    case Command::kAppend:
    case Command::kOnClose:
    case Command::kEphemeral:
    case Command::kAuthProof:
    case Command::kQueuePush:
      need(1, 1);
      put_string(out, k[0]);
      put_string(out, v[0]);
      break;
    case Command::kCompareSet:
      need(1, 2);
      put_string(out, k[0]);
      put_string(out, v[0]);
      put_string(out, v[1]);
      break;
    case Command::kGet:
    case Command::kDeleteKey:
    case Command::kWatchKey:
    case Command::kWorkerNamespace:
    case Command::kQueuePop:
    case Command::kQueueLen:
      need(1, 0);
      put_string(out, k[0]);
      break;
    case Command::kAdd:
    case Command::kBarrier:
      need(1, 0);
      put_string(out, k[0]);
      put_i64(out, request.delta);
      break;
    case Command::kCheck:
    case Command::kWait:
    case Command::kMultiGet:
      put_u64(out, k.size());
      for (const auto& key : k) put_string(out, key);
      break;
    case Command::kMultiSet:
      need(k.size(), k.size());
      put_u64(out, k.size());
      for (size_t i = 0; i < k.size(); ++i) {
        put_string(out, k[i]);
        put_string(out, v[i]);
      }
      break;
    case Command::kGetNumKeys:
    case Command::kCancelWait:
    case Command::kClearCloseActions:
    case Command::kAuthChallenge:
    case Command::kListKeys:
      break;
  }
  return out;
}

uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

}  // namespace ddp::rendezvous::wire
