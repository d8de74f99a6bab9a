#pragma once
// The key-value store every rendezvous goes through. Everything above it (rendezvous
// algorithms, worker runtime, tests) takes a Store&, so it can run on MemoryStore with
// no sockets. Keys and values are binary-safe std::strings.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ddp::rendezvous {

using Duration = std::chrono::milliseconds;

// Spelled-out "wait forever"; every other blocking call has a deadline.
inline constexpr Duration kNoTimeout = Duration::max();
// PyTorch's TCPStore default timeout (300 s).
inline constexpr Duration kDefaultStoreTimeout = std::chrono::seconds(300);

// Records tied to the life of one connection to the store (ddplaunch's own dialect, see
// wire_codec.hpp): how the store tells everybody at once that a process is gone. When the
// process dies (killed, crashed, its host unplugged and its connection reset), the server
// deletes its ephemeral keys and then sets each on_close key that does not exist yet, waking
// whoever waits for it. Destroying the Presence is an orderly leave (clear(), then close).
// Thread-safe.
class Presence {
 public:
  virtual ~Presence() = default;
  Presence() = default;
  Presence(const Presence&) = delete;
  Presence& operator=(const Presence&) = delete;

  // When this presence dies, set key to value unless key exists then.
  virtual void on_close(const std::string& key, const std::string& value) = 0;
  // Sets key to value now (waking waiters); it is deleted when the presence dies or clears.
  virtual void set_ephemeral(const std::string& key, const std::string& value) = 0;
  // An orderly leave: ephemeral keys deleted now, on_close records forgotten.
  virtual void clear() = 0;
  // What another process hands Store::end_presence() to end this presence as if it died
  // (etcd: its lease id); "" where there is no such thing (a TCP store ends one with its
  // connection).
  [[nodiscard]] virtual std::string token() const { return {}; }
};

class Store {
 public:
  explicit Store(Duration timeout = kDefaultStoreTimeout) : timeout_(timeout) {}
  virtual ~Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Sets key to value, waking anyone waiting for key.
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Returns key's value; a missing key is waited for up to timeout() (StoreTimeout after).
  virtual std::string get(const std::string& key) = 0;
  // Adds delta to the decimal ASCII integer at key (missing = 0), returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // If key holds expected (or is missing and expected is empty) sets desired.
  // Returns the value now stored (desired on success, the current value otherwise;
  // expected when the key is missing and expected is non-empty, as PyTorch does).
  virtual std::string compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) = 0;
  // True when every key exists. Never blocks.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Blocks until every key exists or timeout passes (StoreTimeout naming the missing keys).
  virtual void wait(const std::vector<std::string>& keys, Duration timeout) = 0;
  // Deletes key; true when it existed.
  virtual bool delete_key(const std::string& key) = 0;
  // Number of keys in the whole store (PyTorch counts all keys, prefix or not).
  virtual int64_t num_keys() = 0;
  // Appends value to key's value (creates it when missing), waking waiters.
  virtual void append(const std::string& key, const std::string& value) = 0;
  // get() of each key, in order; waits for missing keys like get().
  virtual std::vector<std::string> multi_get(const std::vector<std::string>& keys) = 0;
  // set() of each pair, atomically with respect to other clients.
  virtual void multi_set(const std::vector<std::string>& keys,
                         const std::vector<std::string>& values) = 0;
  // Where this store lives, for error messages ("tcp://127.0.0.1:29500", "memory").
  [[nodiscard]] virtual std::string describe() const = 0;
  // A new Presence (a connection of its own), or nullptr where the store cannot keep one (a
  // PyTorch TCPStore server): callers then rely on heartbeats alone. StoreError when the
  // store cannot be reached.
  virtual std::unique_ptr<Presence> open_presence() { return nullptr; }
  // Ends the presence whose token() this is, as if its process had died (its ephemeral keys
  // go, its on_close records fire): for a process known dead from elsewhere, before its
  // presence would time out. StoreError where the store cannot (the default).
  virtual void end_presence(const std::string& token);

  // A counter many clients bump at once (a round's arrivals): take_ticket returns 1, 2, 3, ...
  // (each number once, as add(key, 1)); tickets returns how many were taken (as add(key, 0)).
  // A store where concurrent adds on one key contend (etcd: compare-and-swap transactions)
  // overrides both; use one pair or the other on a key, not add.
  virtual int64_t take_ticket(const std::string& key) { return add(key, 1); }
  virtual int64_t tickets(const std::string& key) { return add(key, 0); }

  // wait() with the store's default timeout.
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

  [[nodiscard]] Duration timeout() const { return timeout_; }
  virtual void set_timeout(Duration timeout) { timeout_ = timeout; }

 private:
  Duration timeout_;
};

// "a, b, c" (at most a handful, then "... (N keys)") for error messages.
std::string join_keys(const std::vector<std::string>& keys);
// "300000 ms" / "no timeout" for error messages.
std::string describe_timeout(Duration timeout);

// key's value, or nullopt when it does not exist, in one request and without waiting: a
// COMPARE_SET that cannot match returns the current value unchanged (get() is a WAIT and a
// GET, and PyTorch's TCPStore protocol has no plain read).
std::optional<std::string> read_if_present(Store& store, const std::string& key);

}  // namespace ddp::rendezvous
