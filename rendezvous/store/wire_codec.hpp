#pragma once
// The PyTorch TCPStore wire format, as pure functions: bytes in -> request / need-more / bad,
// replies and client requests out. No I/O here, so every framing rule is unit-tested.
//
// PyTorch has numbered its commands four ways; all share the format (little-endian integers,
// strings = uint64 length + bytes). docs/store.md has the table, per release:
//   kLegacy   (PyTorch 1.x and 2.0): no handshake; SET=0 COMPARE_SET=1 GET=2 ADD=3 CHECK=4
//             WAIT=5 GETNUMKEYS=6 WATCH_KEY=7 DELETE_KEY=8. Nothing above 8.
//   kLegacy21 (PyTorch 2.1): no handshake; WATCH_KEY gone, so DELETE_KEY=7 APPEND=8
//             MULTI_GET=9 MULTI_SET=10 CANCEL_WAIT=11. A connection starts as kLegacy and
//             becomes kLegacy21 on the first request only 2.1 sends (refine_legacy()).
//   kV2       (PyTorch >= 2.2): opens with VALIDATE (0x00) + uint32 0x3C85F7CE, then
//             SET=1 COMPARE_SET=2 GET=3 ADD=4 CHECK=5 WAIT=6 GETNUMKEYS=7 DELETE_KEY=8
//             APPEND=9 MULTI_GET=10 MULTI_SET=11 CANCEL_WAIT=12, PING=13 (2.5),
//             QUEUE_PUSH=14 QUEUE_POP=15 QUEUE_LEN=16 (2.8), LIST_KEYS=17 (2.10),
//             BARRIER=18 (2.12).
//   kNative   (ddplaunch's own clients): kV2 plus records tied to the connection's life,
//             ON_CLOSE=0x40 EPHEMERAL=0x41 CLEAR_CLOSE_ACTIONS=0x42, each answered with one
//             byte 0; the authentication AUTH_CHALLENGE=0x43 AUTH_PROOF=0x44 and
//             WORKER_NAMESPACE=0x45 (docs/store.md, "Authentication"). A kV2 connection becomes
//             kNative when it CHECKs kExtensionProbeKey: our server answers "ready" and switches; a
//             PyTorch server answers "not ready" (no such key), so a native client learns it must
//             do without, and PyTorch clients, who never send the probe, never see the extension.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::rendezvous::wire {

inline constexpr uint32_t kValidationMagic = 0x3C85F7CE;
inline constexpr size_t kHandshakeBytes = 5;  // VALIDATE byte + uint32 magic

enum class Dialect : uint8_t { kUnknown, kLegacy, kLegacy21, kV2, kNative };

// The key whose CHECK negotiates kNative (a NUL byte first: no PyTorch program names a key so).
inline const std::string kExtensionProbeKey{"\0ddplaunch/ext/1", 16};
// Registrations one connection may hold (ON_CLOSE + EPHEMERAL), so a client cannot grow the
// server's memory through them.
inline constexpr size_t kMaxCloseActions = 64;

// Dialect-independent command identities.
enum class Command : uint8_t {
  kValidate,
  kSet,
  kCompareSet,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kGetNumKeys,
  kWatchKey,
  kDeleteKey,
  kAppend,
  kMultiGet,
  kMultiSet,
  kCancelWait,
  kPing,
  // kNative only: when the connection closes without CLEAR_CLOSE_ACTIONS, set key to value
  // unless the key exists (waking its waiters).
  kOnClose,
  // kNative only: set key to value now; the server deletes it when the connection closes.
  kEphemeral,
  // kNative only: an orderly leave: ephemeral keys deleted now, ON_CLOSE records forgotten.
  kClearCloseActions,
  // kNative only: no arguments; replies uint8 kAuthRequired / kAuthNotRequired, then the
  // server's nonce as a string (empty when not required).
  kAuthChallenge,
  // kNative only: key = the client's nonce, value = auth::client_proof(); replies uint8
  // kAuthAccepted + auth::server_proof() as a string, or the server closes the connection.
  kAuthProof,
  // kNative, authenticated only: key = the prefix ("/worker/attempt_3/") unauthenticated
  // (PyTorch) connections are confined to from now on; replies one byte 0.
  kWorkerNamespace,
  // kV2 (2.8+): key + value; no reply. Appends to the key's queue (apart from the key-value
  // map), waking one WAIT on the key.
  kQueuePush,
  // kV2 (2.8+): key; replies int64 queue length before the pop, then the popped value as a
  // string when it was not empty.
  kQueuePop,
  // kV2 (2.8+): key; replies int64 queue length.
  kQueueLen,
  // kV2 (2.10+): no arguments; replies int64 count, then each key as a string.
  kListKeys,
  // kV2 (2.12+): key + int64 world size (in Request::delta). Adds 1 to the key's decimal
  // counter; replies STOP_WAITING (uint8 0) to every caller once it reaches the world size.
  kBarrier,
};

// AUTH_CHALLENGE / AUTH_PROOF reply bytes.
inline constexpr uint8_t kAuthNotRequired = 0;
inline constexpr uint8_t kAuthRequired = 1;
inline constexpr uint8_t kAuthAccepted = 0;

// The one-byte reply of the kNative commands.
inline constexpr uint8_t kCloseActionDone = 0;

// Reply bytes fixed by PyTorch.
inline constexpr uint8_t kCheckReady = 0;
inline constexpr uint8_t kCheckNotReady = 1;
inline constexpr uint8_t kWaitStopWaiting = 0;
inline constexpr uint8_t kWaitCanceled = 1;
// Legacy WATCH_KEY notifications (WatchResponseType).
inline constexpr uint8_t kWatchKeyUpdated = 0;
inline constexpr uint8_t kWatchKeyCreated = 1;
inline constexpr uint8_t kWatchKeyDeleted = 2;
inline constexpr uint8_t kWatchCallbackRegistered = 3;
inline constexpr uint8_t kWatchKeyAppended = 4;

struct Limits {
  size_t max_key_bytes = size_t{64} * 1024;
  size_t max_value_bytes = size_t{64} * 1024 * 1024;
  size_t max_keys_per_request = size_t{128} * 1024;
};

// One decoded request. keys/values are filled per command (SET: 1 key + 1 value,
// COMPARE_SET: key + {expected, desired}, MULTI_SET: n keys + n values, ...).
struct Request {
  Command command = Command::kGetNumKeys;
  std::vector<std::string> keys;
  std::vector<std::string> values;
  int64_t delta = 0;   // ADD
  uint32_t nonce = 0;  // PING, VALIDATE (the magic it carried)
};

enum class ParseStatus : uint8_t { kComplete, kNeedMore, kBad };

struct ParseResult {
  ParseStatus status = ParseStatus::kNeedMore;
  size_t consumed = 0;  // kComplete: bytes of the frame
  size_t needed = 0;    // kNeedMore: total bytes to buffer before parsing again is useful
  Request request;      // kComplete only
  std::string error;    // kBad: what was wrong, with the offending value
};

struct DetectResult {
  ParseStatus status = ParseStatus::kNeedMore;
  Dialect dialect = Dialect::kUnknown;
  size_t consumed = 0;  // the handshake's 5 bytes for kV2, 0 for kLegacy
};

// Decides the dialect from a connection's first bytes (needs at most 5).
DetectResult detect_dialect(std::string_view bytes);

// What a kLegacy connection (1.13, 2.0 or 2.1: none says which) has shown of itself so far.
enum class LegacyRole : uint8_t {
  kFresh,  // no request yet
  kWatch,  // its first request was byte 7: a 1.13/2.0 client's watch ("callback") connection
  kMain,   // anything else first: a client's main connection
};
// The dialect of the kLegacy request at the front of bytes: kLegacy21 when only 2.1 can have
// sent it, else kLegacy. 2.1-only: bytes 9-11; byte 7 on a main connection (1.13/2.0 send
// WATCH_KEY only on their watch connection, 2.1 has none, so 7 there is DELETE_KEY); byte 8
// followed at once by more bytes than its key (2.0's DELETE_KEY waits for its reply before
// sending again, 2.1's APPEND sends key and value in one write). kNeedMore while byte 8's key
// has not all arrived.
DetectResult refine_legacy(std::string_view bytes, LegacyRole role);

// Parses one request from the front of bytes. Lengths are checked against limits before
// anything is copied, so a forged length never makes the caller allocate.
ParseResult parse_request(std::string_view bytes, Dialect dialect, const Limits& limits);

// The wire byte of command in dialect; -1 when the dialect has no such command.
int command_byte(Command command, Dialect dialect);
// Printable name ("SET", "MULTI_GET") for logs and errors.
const char* command_name(Command command);
// "1.13/2.0", "2.1", "2.2+", "2.2+ddplaunch" for messages.
const char* dialect_name(Dialect dialect);

// --- encoding (replies from the server, requests from the client) ---
void put_u8(std::string& out, uint8_t v);
void put_u32(std::string& out, uint32_t v);
void put_u64(std::string& out, uint64_t v);
void put_i64(std::string& out, int64_t v);
void put_string(std::string& out, std::string_view s);

// The complete frame for request in dialect (throws ProtocolError when the dialect lacks
// the command). VALIDATE encodes as the handshake.
std::string encode_request(const Request& request, Dialect dialect);

// Little-endian reads from exactly-sized buffers (caller guarantees the size).
uint32_t get_u32(const char* p);
uint64_t get_u64(const char* p);

}  // namespace ddp::rendezvous::wire
