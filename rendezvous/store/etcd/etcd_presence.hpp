#pragma once
// Presence (rendezvous/store/store.hpp) on etcd: a lease kept alive by a thread of its own.
// Ephemeral keys are put with the lease, so etcd deletes them when the lease expires (the
// process died, or lost etcd for longer than the TTL). An on_close record is a key with the
// lease under /ddp-presence<prefix><lease>/r/<key>; every live presence of the same prefix
// watches those records, and when one is deleted by an expiry (not by an orderly clear(),
// which first puts /ddp-presence<prefix><lease>/left in the same transaction) it sets <key>
// unless it exists. So an on_close fires only while another presence of the job is alive to
// see it, and a death is noticed after the lease's TTL, not at once as with a TCP connection.
// Thread-safe. docs/etcd.md, "Presence".
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/store/etcd/etcd_client.hpp"
#include "rendezvous/store/store.hpp"

namespace ddp::rendezvous {

class EtcdPresence final : public Presence {
 public:
  // Grants the lease (StoreError when etcd cannot be reached) and starts the keepalive and
  // the watcher of other presences' records.
  EtcdPresence(std::shared_ptr<EtcdClient> client, std::string prefix, std::chrono::seconds ttl,
               Duration timeout);
  // An orderly leave (clear(), then the lease is revoked); errors are logged, not thrown.
  ~EtcdPresence() override;

  void on_close(const std::string& key, const std::string& value) override;
  void set_ephemeral(const std::string& key, const std::string& value) override;
  void clear() override;

  // For tests: as if the process died: its threads stop and nothing is cleared or revoked,
  // so the lease expires after its TTL and the other presences act on its records.
  void abandon();
  [[nodiscard]] int64_t lease() const { return lease_; }
  // Its lease id: revoking it (EtcdStore::end_presence) ends this presence as an expiry would.
  [[nodiscard]] std::string token() const override { return std::to_string(lease_); }

 private:
  void keepalive_loop();
  void watch_loop();
  // A record deleted in the batch of watch events: fire its on_close unless it was cleared.
  void on_record_deleted(const nlohmann::json& event);
  void fire_if_expired(const nlohmann::json& event);
  void stop_threads();
  void put_with_lease(const std::string& full_key, const std::string& value, const char* op,
                      const std::string& key);
  void throw_if_dead(const char* op, const std::string& key) const;
  [[nodiscard]] std::string lease_dir(int64_t lease) const;

  std::shared_ptr<EtcdClient> client_;
  std::string prefix_;
  std::string records_;  // "/ddp-presence" + prefix_
  std::chrono::seconds ttl_;
  Duration timeout_;
  int64_t lease_ = 0;
  // The revision after the lease grant: the watch of other presences starts there, so a death
  // between the grant and the watch's first reply is not missed.
  int64_t watch_from_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool dead_ = false;
  std::vector<std::string> ephemeral_;  // full keys
  WatchCancel watch_cancel_;
  std::thread keepalive_;
  std::thread watcher_;
};

}  // namespace ddp::rendezvous
