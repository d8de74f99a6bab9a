// libFuzzer target: the store's wire codec (rendezvous/store/wire_codec.hpp). Any bytes go
// through detect_dialect and parse_request in every dialect, frame after frame as a session
// would; each complete request is encoded again and must parse back to the same request.
// kBad is an answer, not a bug; a crash, a sanitizer report or a failed round trip is.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/error.hpp"
#include "rendezvous/store/wire_codec.hpp"

namespace wire = ddp::rendezvous::wire;

namespace {

// Small limits too, so the limit checks are reached by inputs of a few bytes.
const wire::Limits kDefault{};
const wire::Limits kSmall{16, 64, 4};

bool same(const wire::Request& a, const wire::Request& b) {
  return a.command == b.command && a.keys == b.keys && a.values == b.values && a.delta == b.delta &&
         a.nonce == b.nonce;
}

void round_trip(const wire::Request& request, std::string_view frame, wire::Dialect dialect,
                const wire::Limits& limits) {
  // Every command that parsed in a dialect exists in it, so encoding cannot throw.
  const std::string encoded = wire::encode_request(request, dialect);
  const auto again = wire::parse_request(encoded, dialect, limits);
  if (again.status != wire::ParseStatus::kComplete || again.consumed != encoded.size() ||
      !same(again.request, request) || encoded != frame.substr(0, encoded.size())) {
    std::abort();
  }
}

void parse_all(std::string_view bytes, wire::Dialect dialect, const wire::Limits& limits) {
  while (!bytes.empty()) {
    const auto result = wire::parse_request(bytes, dialect, limits);
    if (result.status == wire::ParseStatus::kBad) {
      if (result.error.empty()) std::abort();  // a bad frame always says why
      return;
    }
    if (result.status == wire::ParseStatus::kNeedMore) {
      if (result.needed <= bytes.size()) std::abort();  // the hint must ask for more
      return;
    }
    if (result.consumed == 0 || result.consumed > bytes.size()) std::abort();
    round_trip(result.request, bytes, dialect, limits);
    // The name tables must cover every command the parser returns.
    if (wire::command_name(result.request.command) == nullptr) std::abort();
    bytes.remove_prefix(result.consumed);
  }
}

}  // namespace

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry points are named so
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const auto detected = wire::detect_dialect(bytes);
  if (detected.status == wire::ParseStatus::kComplete) {
    if (detected.consumed > bytes.size()) std::abort();
    parse_all(bytes.substr(detected.consumed), detected.dialect, kDefault);
  }
  for (auto dialect : {wire::Dialect::kLegacy, wire::Dialect::kLegacy21, wire::Dialect::kV2,
                       wire::Dialect::kNative}) {
    parse_all(bytes, dialect, kDefault);
    parse_all(bytes, dialect, kSmall);
  }
  // A legacy connection's refinement never claims more than it was given.
  for (auto role : {wire::LegacyRole::kFresh, wire::LegacyRole::kMain}) {
    const auto refined = wire::refine_legacy(bytes, role);
    if (refined.consumed != 0) std::abort();
  }
  return 0;
}
