#pragma once
// What the store server knows, apart from sockets: the key-value map, the waiters parked on
// missing keys, and (legacy dialect) the key watchers. Single-threaded by design: the
// server's one event loop is its only caller, so there are no locks.
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "rendezvous/store/server/store_quota.hpp"
#include "rendezvous/store/store_semantics.hpp"
#include "rendezvous/store/wire_codec.hpp"

namespace ddp::rendezvous {

// The server's view of one client connection.
class ReplyChannel {
 public:
  virtual ~ReplyChannel() = default;
  // Queues reply bytes (never blocks).
  virtual void send(std::string_view bytes) = 0;
  // "127.0.0.1:41234", for log lines.
  [[nodiscard]] virtual const std::string& peer() const = 0;
  // The prefix the connection's keys were stored under ("/worker/attempt_2/"; empty: none).
  // GETNUMKEYS and LIST_KEYS see only keys under it, and keys it is told of lose it.
  [[nodiscard]] virtual std::string_view key_scope() const { return {}; }
};

class ServerState {
 public:
  // quota: the bytes and keys it may hold (unlimited by default).
  explicit ServerState(StoreQuota quota = StoreQuota()) : quota_(quota) {}

  // Executes one request from conn: replies, parks a wait, or wakes others. A new wait
  // replaces conn's parked WAIT. Throws StoreLimitExceeded, before anything changes, for a
  // request that could take the store past its quota, and ProtocolError for a request the
  // connection must be closed for (ADD on a non-integer value, VALIDATE with a wrong magic, a wait
  // while a GET of missing keys is parked).
  void execute(const std::shared_ptr<ReplyChannel>& conn, wire::Request&& request);
  // Forgets conn's parked wait and watches (it disconnected), and carries out its close
  // actions: its ephemeral keys are deleted, then each ON_CLOSE key that does not exist is
  // set (waking its waiters), in one step as far as other clients can tell.
  // run_close_actions false: the server itself is stopping (nobody died).
  void disconnect(ReplyChannel& conn, bool run_close_actions = true);
  // True while conn has a wait parked (a reset now is "mid-wait").
  [[nodiscard]] bool waiting(const ReplyChannel& conn) const;

  [[nodiscard]] size_t num_keys() const { return data_.size(); }
  [[nodiscard]] size_t num_waiters() const { return pending_.size(); }
  // Bytes held for clients (keys + values + ON_CLOSE records + keys of parked waits and of
  // legacy watches), as the quota counts them.
  [[nodiscard]] size_t held_bytes() const { return quota_.bytes(); }
  // Connections holding ON_CLOSE or EPHEMERAL records.
  [[nodiscard]] size_t num_bound_connections() const { return close_actions_.size(); }

 private:
  // A WAIT, GET or MULTI_GET whose keys are not all there yet, or a BARRIER short of its
  // world size.
  struct Pending {
    uint64_t ticket = 0;
    std::weak_ptr<ReplyChannel> conn;
    wire::Request request;
    size_t missing = 0;
    size_t bytes = 0;  // its keys, counted in the quota while parked
  };
  struct WaitEntry {
    ReplyChannel* conn = nullptr;
    uint64_t ticket = 0;
  };
  // What happens to the store when one connection closes (kNative's extension).
  struct CloseActions {
    std::vector<std::pair<std::string, std::string>> on_close;
    std::vector<std::string> ephemeral;
  };

  // Replies now when every key exists; otherwise parks the request.
  // recheck: a parked request woken while one of its keys was deleted again parks anew; its
  // bytes were admitted when it first parked, so the quota does not refuse it now.
  void wait_or_reply(const std::shared_ptr<ReplyChannel>& conn, wire::Request&& request,
                     bool recheck = false);
  void reply_ready(ReplyChannel& conn, const wire::Request& request);
  // Drops conn's parked wait, if any (CANCEL_WAIT, disconnect).
  void disconnect_wait(ReplyChannel& conn);
  // Whether key is there for a request: a WAIT or CHECK also counts a non-empty queue.
  [[nodiscard]] bool present(const std::string& key, wire::Command command) const;
  // QUEUE_PUSH: counts for the oldest WAIT on key, which goes when no other key is missing.
  void queue_pushed(const std::string& key);
  // BARRIER: counts conn in; replies to every parked caller once the count is reached.
  void barrier(const std::shared_ptr<ReplyChannel>& conn, wire::Request&& request);
  // The keys in scope with the scope taken off (LIST_KEYS), or only their number.
  [[nodiscard]] std::vector<std::string> keys_in(std::string_view scope) const;
  [[nodiscard]] size_t count_in(std::string_view scope) const;
  // A key came into existence (set, add, compare_set, append, multi_set): wake its waiters.
  void key_created(const std::string& key);
  void store(const std::string& key, std::string value);
  // Deletes key (notifying legacy watchers); true when it existed.
  bool erase(const std::string& key);
  // ON_CLOSE / EPHEMERAL: the record for conn, refused past wire::kMaxCloseActions.
  CloseActions& close_actions(const ReplyChannel& conn, const wire::Request& request);
  // Legacy WATCH_KEY notification to every watcher of key.
  void notify_watchers(const std::string& key, uint8_t kind, std::string_view old_value,
                       std::string_view new_value);

  // The size of key's value in data_, for the quota; existed false when it has none.
  [[nodiscard]] size_t value_size(const std::string& key, bool& existed) const;

  StoreQuota quota_;
  KeyValueMap data_;
  std::unordered_map<std::string, std::vector<WaitEntry>> waiters_;
  std::unordered_map<const ReplyChannel*, Pending> pending_;
  std::unordered_map<std::string, std::vector<std::weak_ptr<ReplyChannel>>> watchers_;
  // The keys each connection watches, so disconnect() drops its watches and their bytes.
  std::unordered_map<const ReplyChannel*, std::vector<std::string>> watched_;
  std::unordered_map<const ReplyChannel*, CloseActions> close_actions_;
  // QUEUE_PUSH / QUEUE_POP: apart from data_, as in PyTorch's libuv server.
  std::unordered_map<std::string, std::deque<std::string>> queues_;
  // Parked BARRIER callers per key (their Pending holds the request).
  std::unordered_map<std::string, std::vector<WaitEntry>> barriers_;
  uint64_t next_ticket_ = 1;
};

}  // namespace ddp::rendezvous
