#include "rendezvous/store/etcd/etcd_presence.hpp"

#include <exception>
#include <string_view>
#include <utility>

#include "common/error.hpp"
#include "common/log.hpp"

namespace ddp::rendezvous {
namespace {

using nlohmann::json;

constexpr auto kRetryPause = std::chrono::seconds(1);

json put_request(const std::string& full_key, const std::string& value, int64_t lease) {
  json put = {{"key", base64_encode(full_key)}, {"value", base64_encode(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  return put;
}

}  // namespace

EtcdPresence::EtcdPresence(std::shared_ptr<EtcdClient> client, std::string prefix,
                           std::chrono::seconds ttl, Duration timeout)
    : client_(std::move(client)),
      prefix_(std::move(prefix)),
      records_("/ddp-presence" + prefix_),
      ttl_(ttl),
      timeout_(timeout) {
  const json reply = client_->call("/v3/lease/grant", {{"TTL", std::to_string(ttl_.count())}},
                                   Deadline::after(timeout_), "open_presence (lease grant)", true);
  lease_ = json_int(reply, "ID");
  if (lease_ == 0) throw StoreError("etcd: open_presence: the lease grant answered no ID");
  watch_from_ = json_int(reply.value("header", json::object()), "revision") + 1;
  keepalive_ = std::thread([this] { keepalive_loop(); });
  watcher_ = std::thread([this] { watch_loop(); });
}

EtcdPresence::~EtcdPresence() {
  bool dead = false;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    dead = dead_;
  }
  if (!dead) {
    try {
      clear();
      client_->call("/v3/lease/revoke", {{"ID", std::to_string(lease_)}}, Deadline::after(timeout_),
                    "presence leave (lease revoke)", true);
    } catch (const Error& e) {
      // A lease another node revoked (it saw this one die: the death witness) is already gone.
      if (std::string_view(e.what()).find("requested lease not found") == std::string_view::npos) {
        DDP_LOG_WARN(std::string("etcd presence: orderly leave failed (the lease expires in ") +
                     std::to_string(ttl_.count()) + " s instead): " + e.what());
      }
    }
  }
  stop_threads();
}

void EtcdPresence::stop_threads() {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  watch_cancel_.cancel();
  if (keepalive_.joinable()) keepalive_.join();
  if (watcher_.joinable()) watcher_.join();
}

void EtcdPresence::abandon() {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    dead_ = true;
  }
  stop_threads();
}

std::string EtcdPresence::lease_dir(int64_t lease) const {
  return records_ + std::to_string(lease) + "/";
}

void EtcdPresence::throw_if_dead(const char* op, const std::string& key) const {
  const std::lock_guard<std::mutex> lock(mu_);
  if (dead_) {
    throw StoreError("etcd " + client_->current_endpoint() + ": presence " + op + " '" + key +
                     "': the presence's lease " + std::to_string(lease_) + " is gone");
  }
}

void EtcdPresence::put_with_lease(const std::string& full_key, const std::string& value,
                                  const char* op, const std::string& key) {
  throw_if_dead(op, key);
  client_->call("/v3/kv/put", put_request(full_key, value, lease_), Deadline::after(timeout_),
                std::string("presence ") + op + " '" + key + "' (prefix '" + prefix_ + "')", true);
}

void EtcdPresence::on_close(const std::string& key, const std::string& value) {
  put_with_lease(lease_dir(lease_) + "r/" + key, value, "on_close", key);
}

void EtcdPresence::set_ephemeral(const std::string& key, const std::string& value) {
  put_with_lease(prefix_ + key, value, "set_ephemeral", key);
  const std::lock_guard<std::mutex> lock(mu_);
  ephemeral_.push_back(prefix_ + key);
}

void EtcdPresence::clear() {
  throw_if_dead("clear", "");
  std::vector<std::string> ephemeral;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    ephemeral.swap(ephemeral_);
  }
  // One transaction: the "left" mark and the records' deletion share a revision, so a
  // watcher that sees the records go finds the mark at that revision and fires nothing.
  const std::string dir = lease_dir(lease_);
  json ops = json::array();
  ops.push_back({{"request_put", put_request(dir + "left", "", lease_)}});
  ops.push_back({{"request_delete_range",
                  {{"key", base64_encode(dir + "r/")},
                   {"range_end", base64_encode(prefix_range_end(dir + "r/"))}}}});
  for (const auto& full_key : ephemeral) {
    ops.push_back({{"request_delete_range", {{"key", base64_encode(full_key)}}}});
  }
  client_->call("/v3/kv/txn", {{"success", ops}}, Deadline::after(timeout_),
                "presence clear (prefix '" + prefix_ + "')", true);
}

void EtcdPresence::keepalive_loop() {
  // At least once a second: the lease then outlives any silence up to its TTL less about three
  // seconds (the last keepalive before it, and the first one through after it).
  const auto interval = std::min<std::chrono::milliseconds>(
      std::chrono::duration_cast<std::chrono::milliseconds>(ttl_) / 3, std::chrono::seconds(1));
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, interval, [this] { return stopping_; })) {
    lock.unlock();
    bool gone = false;
    try {
      const json reply = client_->call("/v3/lease/keepalive", {{"ID", std::to_string(lease_)}},
                                       Deadline::after(interval), "presence keepalive", true);
      gone = json_int(reply.value("result", json::object()), "TTL") <= 0;
    } catch (const std::exception& e) {
      // Missed once: the lease lives on for its TTL, and the next beat may get through.
      DDP_LOG_WARN(std::string("etcd presence: keepalive of lease ") + std::to_string(lease_) +
                   " failed: " + e.what());
    }
    lock.lock();
    if (gone) {
      DDP_LOG_WARN("etcd presence: lease " + std::to_string(lease_) +
                   " expired: its ephemeral keys are gone and its on_close records fired");
      dead_ = true;
      return;
    }
  }
}

void EtcdPresence::watch_loop() {
  EtcdClient::WatchSpec spec;
  spec.key = records_;
  spec.range_end = prefix_range_end(records_);
  spec.prev_kv = true;
  spec.no_put = true;
  spec.start_revision = watch_from_;
  for (;;) {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
    }
    try {
      const auto result = client_->watch(
          spec, Deadline::never(), "presence watch of '" + records_ + "'",
          [this](const json& events) {
            for (const auto& event : events) on_record_deleted(event);
            return false;
          },
          &watch_cancel_);
      if (result == EtcdClient::WatchResult::kCancelled) return;
      // Compacted: go on from now (deaths in the gap are left to the other watchers).
      spec.start_revision = 0;
    } catch (const std::exception& e) {
      DDP_LOG_WARN(std::string("etcd presence: watching other presences failed: ") + e.what());
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, kRetryPause, [this] { return stopping_; })) return;
    }
  }
}

void EtcdPresence::on_record_deleted(const json& event) {
  // Nothing may escape into the watch: it would restart from "now" and skip deaths.
  try {
    fire_if_expired(event);
  } catch (const std::exception& e) {
    DDP_LOG_WARN(std::string("etcd presence: on_close of an expired lease failed: ") + e.what());
  }
}

void EtcdPresence::fire_if_expired(const json& event) {
  if (event.value("type", std::string("PUT")) != "DELETE") return;
  const auto prev = event.find("prev_kv");
  const auto kv = event.find("kv");
  if (prev == event.end() || kv == event.end()) return;
  const std::string full = base64_decode(kv->value("key", std::string()));
  // <records_><lease>/r/<key>
  const auto slash = full.find('/', records_.size());
  if (full.compare(0, records_.size(), records_) != 0 || slash == std::string::npos ||
      full.compare(slash, 3, "/r/") != 0) {
    return;
  }
  const std::string lease_text = full.substr(records_.size(), slash - records_.size());
  const std::string key = full.substr(slash + 3);
  const std::string value = base64_decode(prev->value("value", std::string()));
  const int64_t revision = json_int(*kv, "mod_revision");
  // Cleared in order (the mark exists at the deletion's revision): nothing fires.
  json range = {{"key", base64_encode(records_ + lease_text + "/left")},
                {"revision", std::to_string(revision)}};
  const json reply = client_->call("/v3/kv/range", range, Deadline::after(timeout_),
                                   "presence on_close '" + key + "'", true);
  if (json_int(reply, "count") > 0) return;
  // Set key unless it exists; every watcher does this, and only the first one writes.
  json compare = {{"key", base64_encode(prefix_ + key)},
                  {"result", "EQUAL"},
                  {"target", "CREATE"},
                  {"create_revision", "0"}};
  json txn = {{"compare", json::array({compare})},
              {"success", json::array({{{"request_put", put_request(prefix_ + key, value, 0)}}})}};
  const json done = client_->call("/v3/kv/txn", txn, Deadline::after(timeout_),
                                  "presence on_close '" + key + "'", true);
  if (done.value("succeeded", false)) {
    DDP_LOG_INFO("etcd presence: lease " + lease_text + " expired: set '" + key + "'");
  }
}

}  // namespace ddp::rendezvous
