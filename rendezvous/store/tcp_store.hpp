#pragma once
// TCP client Store speaking PyTorch TCPStore's 2.x dialect (VALIDATE handshake first).
// Thread-safe: short requests share one connection under a mutex; each blocking wait (wait,
// and the wait phase of get/multi_get) runs on a connection of its own from a small pool, so
// a thread blocked in wait() never holds up other threads. Every call has a deadline; errors
// name the endpoint, the keys and the timeout. A server that goes away ends a blocked call at
// once with StoreError; the next call reconnects (within connect_timeout).
#include <cstdint>
#include <memory>
#include <string>

#include "rendezvous/store/store.hpp"

namespace ddp::rendezvous {

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 29500;
  // Default deadline of get/wait/multi_get (Store::timeout()).
  Duration timeout = kDefaultStoreTimeout;
  // How long to keep retrying connect (refused / unreachable) before StoreError.
  Duration connect_timeout = std::chrono::seconds(60);
  // true: waits (and the wait phase of get/multi_get) hold the shared connection instead of
  // taking one of their own, so the client opens one connection in all. For single-threaded
  // clients by the thousand (bench/rdzv: 16k simulated agents within one fd limit).
  bool one_connection = false;
  // The job secret (docs/security.md): non-empty -> every connection proves it to the store
  // (and the store proves it back) before anything else; AuthError when they disagree.
  std::string secret{};
};

class TcpStore final : public Store {
 public:
  // Connects (retrying with backoff until connect_timeout) and validates.
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  using Store::wait;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  void append(const std::string& key, const std::string& value) override;
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::string>& keys,
                 const std::vector<std::string>& values) override;
  [[nodiscard]] std::string describe() const override;
  // A connection of its own that negotiates ddplaunch's dialect; nullptr from a PyTorch server.
  std::unique_ptr<Presence> open_presence() override;

  // Confines unauthenticated (PyTorch) clients of a store with a secret to keys under prefix
  // (WORKER_NAMESPACE); a no-op on a store without ddplaunch's dialect. Needs the secret.
  void set_worker_namespace(const std::string& prefix);

  // Round-trips a PING; throws StoreError when the server is gone.
  void ping();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::rendezvous
