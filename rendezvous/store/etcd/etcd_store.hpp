#pragma once
// Store on etcd v3 (through its HTTP/JSON gateway, EtcdClient): every key lives under a
// prefix ("/ddplaunch/<rdzv_id>/"), so several jobs share one etcd. add, append and
// compare_set are transactions on the key's mod revision (retried when another client got
// there first); wait reads the keys and then watches the first missing one from the
// revision read, so a key set in between is never missed and nothing polls. Every call has
// the store's timeout as its deadline; errors name the member, the operation, the key and
// etcd's message. A transaction whose member died before answering is resolved through a
// marker key of this store and thread, so each add/append applies once. docs/etcd.md.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/store/etcd/etcd_client.hpp"
#include "rendezvous/store/store.hpp"

namespace ddp::rendezvous {

struct EtcdStoreOptions {
  // "host:port" or "http://host:port", one per member, tried in order.
  std::vector<std::string> endpoints{"127.0.0.1:2379"};
  // Prepended to every key; num_keys counts the keys under it.
  std::string prefix = "/ddplaunch/";
  // Default deadline of every call (Store::timeout()).
  Duration timeout = kDefaultStoreTimeout;
  // How long a call goes round the members while none answers before StoreError.
  Duration unreachable_timeout = std::chrono::seconds(10);
  // How long one member may sit on a request before the call tries the next one
  // (EtcdClientOptions::attempt_timeout).
  Duration attempt_timeout = std::chrono::seconds(10);
  // The lease of each presence: how long after a process dies its ephemeral keys go and its
  // on_close records fire (at least etcd's minimum, 1.5 election timeouts).
  std::chrono::seconds presence_ttl = std::chrono::seconds(10);
  // etcd user and password where the cluster has auth enabled ("" = none).
  std::string username;
  std::string password;
  // TLS files (EtcdClientOptions::tls): https:// endpoints, or bare ones when any is given.
  TlsOptions tls;
};

class EtcdStore final : public Store {
 public:
  // ConfigError on a bad endpoint; connects lazily (the first call reports an etcd down).
  explicit EtcdStore(EtcdStoreOptions options);
  // Deletes the marker keys this store wrote (best effort, within a second; never throws).
  ~EtcdStore() override;
  EtcdStore(const EtcdStore&) = delete;
  EtcdStore& operator=(const EtcdStore&) = delete;

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
  // "etcd://127.0.0.1:2379,127.0.0.1:22379/ddplaunch/job/" style: members and prefix.
  [[nodiscard]] std::string describe() const override;
  // An EtcdPresence: a lease of presence_ttl kept alive by a thread (etcd_presence.hpp).
  std::unique_ptr<Presence> open_presence() override;
  // Revokes the lease token names (EtcdPresence::token()).
  void end_presence(const std::string& token) override;
  // No contention: each ticket is a key of its own under <key>/tickets/; its number is how
  // many of them existed at its revision (revisions are totally ordered).
  int64_t take_ticket(const std::string& key) override;
  int64_t tickets(const std::string& key) override;

 private:
  struct Snapshot;
  // The keys' values (nullopt when missing) at one revision.
  Snapshot read(const std::vector<std::string>& keys, const Deadline& deadline,
                const std::string& context);
  // Reads key once: its value and mod revision, or nullopt.
  struct Current {
    std::optional<std::string> value;
    int64_t mod_revision = 0;
    int64_t revision = 0;  // the store's revision when read (the reply's header)
    int conflicts = 0;     // transactions lost to other clients so far (put_if_unchanged)
    // One fresh nonce per transaction put_if_unchanged sent for this call, in order.
    std::vector<std::string> nonces;
  };
  Current read_one(const std::string& key, const Deadline& deadline, const std::string& context);
  // A transaction: put key=value when key is unchanged since cur was read, and this thread's
  // marker key (marker_key()) = a fresh nonce. Returns the index in cur.nonces of the
  // transaction of this call that applied (the one just sent, or an earlier one whose
  // outcome was unknown and that etcd applied late); nullopt when none did, and cur is then
  // what the key holds now (read in the same transaction). A transaction whose outcome is
  // unknown (EtcdOutcomeUnknown) is sent again, the same, until its answer or the deadline:
  // StoreTimeout saying the outcome is unknown.
  std::optional<size_t> put_if_unchanged(const std::string& key, Current& cur,
                                         const std::string& value, const Deadline& deadline,
                                         const std::string& context);
  // The marker key of the calling thread in this store: under marker_dir_.
  [[nodiscard]] std::string marker_key() const;
  // Blocks until every key exists (StoreTimeout naming the missing ones at deadline).
  void wait_until(const std::vector<std::string>& keys, const Deadline& deadline, Duration timeout,
                  const char* op);
  std::string full(const std::string& key) const { return options_.prefix + key; }
  std::string context(const char* op, const std::vector<std::string>& keys) const;

  EtcdStoreOptions options_;
  std::shared_ptr<EtcdClient> client_;  // shared with the presences
  // "/ddp-marker<prefix><random store id>/": outside the prefix, so num_keys() and the
  // job's own keys never see the markers.
  std::string marker_dir_;
  std::atomic<bool> markers_written_{false};  // the destructor deletes marker_dir_ then
};

}  // namespace ddp::rendezvous
