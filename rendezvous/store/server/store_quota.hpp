#pragma once
// The bytes and keys a store server holds for its clients, against ServerLimits::max_bytes
// and max_keys. A request that could take the store past either is refused before it runs
// (the TCPStore protocol has no error reply: the session closes that connection, naming the
// limit); everything else is counted as it happens. Counted bytes are keys + values +
// ON_CLOSE records, not the map's own overhead.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "common/error.hpp"
#include "rendezvous/store/store_semantics.hpp"
#include "rendezvous/store/wire_codec.hpp"

namespace ddp::rendezvous {

// A request refused by a store limit; the message names the limit and how to raise it.
class StoreLimitExceeded : public Error {
 public:
  using Error::Error;
};

class StoreQuota {
 public:
  explicit StoreQuota(size_t max_bytes = std::numeric_limits<size_t>::max(),
                      size_t max_keys = std::numeric_limits<size_t>::max())
      : max_bytes_(max_bytes), max_keys_(max_keys) {}

  // Throws StoreLimitExceeded when request, run against data, could take the store past a
  // limit. Requests that only read, wait or delete always pass.
  void admit(const wire::Request& request, const KeyValueMap& data) const;
  // Throws StoreLimitExceeded when parking request (a WAIT, GET or MULTI_GET of missing
  // keys), whose keys take `bytes`, would take the store past its byte limit.
  void admit_parked(const wire::Request& request, size_t bytes) const;
  // Bytes that came (key + value of a new entry, a longer value, an ON_CLOSE record) or went.
  void add(size_t bytes) { bytes_ += bytes; }
  void remove(size_t bytes) { bytes_ -= bytes < bytes_ ? bytes : bytes_; }
  // key's entry went from old_size bytes of value (existed) to new_size (exists).
  void changed(const std::string& key, bool existed, size_t old_size, bool exists, size_t new_size);
  [[nodiscard]] size_t bytes() const { return bytes_; }

 private:
  size_t max_bytes_;
  size_t max_keys_;
  size_t bytes_ = 0;
};

}  // namespace ddp::rendezvous
