#pragma once
// gloo::rendezvous::Store over our Store, so Gloo's full-mesh rendezvous runs on the job's
// TCP store (or a MemoryStore in tests).
#include <gloo/rendezvous/store.h>

#include <memory>

#include "rendezvous/store/store.hpp"

namespace ddp::worker_runtime {

class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  // Every wait() without an explicit timeout uses `timeout`.
  GlooStoreAdapter(std::shared_ptr<rendezvous::Store> store, rendezvous::Duration timeout)
      : store_(std::move(store)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<rendezvous::Store> store_;
  rendezvous::Duration timeout_;
};

}  // namespace ddp::worker_runtime
