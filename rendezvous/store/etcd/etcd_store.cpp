#include "rendezvous/store/etcd/etcd_store.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <random>
#include <string_view>
#include <thread>
#include <utility>

#include "common/error.hpp"
#include "common/log.hpp"
#include "rendezvous/store/etcd/etcd_presence.hpp"
#include "rendezvous/store/store_semantics.hpp"

namespace ddp::rendezvous {
namespace {

using nlohmann::json;

// etcd's default --max-txn-ops: reads of more keys go in several transactions pinned to the
// first one's revision; a multi_set of more keys is refused (it could not be atomic).
constexpr size_t kMaxTxnOps = 128;

json range_of(const std::string& full_key, int64_t revision = 0) {
  json r = {{"key", base64_encode(full_key)}};
  if (revision > 0) r["revision"] = std::to_string(revision);
  return r;
}

json put_of(const std::string& full_key, const std::string& value) {
  return {{"request_put", {{"key", base64_encode(full_key)}, {"value", base64_encode(value)}}}};
}

// The first kv of a range reply, or nullptr when the key is missing.
const json* first_kv(const json& range_reply) {
  const auto kvs = range_reply.find("kvs");
  if (kvs == range_reply.end() || !kvs->is_array() || kvs->empty()) return nullptr;
  return &(*kvs)[0];
}

std::string value_of(const json& kv) {
  return base64_decode(kv.value("value", std::string()));
}

// The range reply of a transaction's i-th response.
const json& txn_range(const json& txn_reply, size_t i) {
  static const json kEmpty = json::object();
  const auto responses = txn_reply.find("responses");
  if (responses == txn_reply.end() || i >= responses->size()) return kEmpty;
  const auto range = (*responses)[i].find("response_range");
  return range == (*responses)[i].end() ? kEmpty : *range;
}

// How long the destructor may spend deleting the store's marker keys.
constexpr auto kMarkerCleanup = std::chrono::seconds(1);
// The pause between sends of a transaction whose outcome stayed unknown, after the first
// resend (which goes to the next member at once): 50 ms doubling to 500 ms.
constexpr auto kFirstResendBackoff = std::chrono::milliseconds(50);
constexpr auto kMaxResendBackoff = std::chrono::milliseconds(500);

// 128 random bits in hex: a store's id, and each transaction's nonce.
std::string random_hex() {
  thread_local std::mt19937_64 rng{(static_cast<uint64_t>(std::random_device{}()) << 32U) ^
                                   std::random_device{}()};
  std::string out;
  for (int i = 0; i < 2; ++i) {
    std::array<char, 17> text{};
    std::snprintf(text.data(), text.size(), "%016llx", static_cast<unsigned long long>(rng()));
    out += text.data();
  }
  return out;
}

// A small number per thread of the process, for marker keys: threads of one store never
// share a marker, so one thread's transaction cannot overwrite another's nonce.
uint64_t thread_index() {
  static std::atomic<uint64_t> next{0};
  thread_local uint64_t index = next++;
  return index;
}

EtcdClientOptions client_options(const EtcdStoreOptions& options) {
  EtcdClientOptions client;
  client.endpoints = options.endpoints;
  client.unreachable_timeout = options.unreachable_timeout;
  client.attempt_timeout = options.attempt_timeout;
  client.username = options.username;
  client.password = options.password;
  client.tls = options.tls;
  return client;
}

}  // namespace

struct EtcdStore::Snapshot {
  int64_t revision = 0;
  std::vector<std::optional<std::string>> values;
};

EtcdStore::EtcdStore(EtcdStoreOptions options)
    : Store(options.timeout),
      options_(std::move(options)),
      client_(std::make_shared<EtcdClient>(client_options(options_))),
      marker_dir_("/ddp-marker" + options_.prefix + random_hex() + "/") {}

EtcdStore::~EtcdStore() {
  if (!markers_written_.load()) return;
  try {
    const json range = {{"key", base64_encode(marker_dir_)},
                        {"range_end", base64_encode(prefix_range_end(marker_dir_))}};
    client_->call("/v3/kv/deleterange", range,
                  Deadline::after(std::min<Duration>(timeout(), kMarkerCleanup)),
                  "delete the markers under '" + marker_dir_ + "'", true);
  } catch (const std::exception& e) {
    DDP_LOG_DEBUG(std::string("etcd store: ") + e.what() + "; they stay behind");
  }
}

std::string EtcdStore::marker_key() const {
  return marker_dir_ + std::to_string(thread_index());
}

std::string EtcdStore::describe() const {
  return "etcd " + client_->endpoints_text() + " prefix '" + options_.prefix + "'";
}

std::string EtcdStore::context(const char* op, const std::vector<std::string>& keys) const {
  std::string text = op;
  if (!keys.empty()) text += " " + join_keys(keys);
  return text + " (prefix '" + options_.prefix + "')";
}

EtcdStore::Snapshot EtcdStore::read(const std::vector<std::string>& keys, const Deadline& deadline,
                                    const std::string& ctx) {
  Snapshot snap;
  snap.values.resize(keys.size());
  for (size_t begin = 0; begin < keys.size(); begin += kMaxTxnOps) {
    const size_t end = std::min(keys.size(), begin + kMaxTxnOps);
    json ops = json::array();
    for (size_t i = begin; i < end; ++i) {
      ops.push_back({{"request_range", range_of(full(keys[i]), snap.revision)}});
    }
    const json reply = client_->call("/v3/kv/txn", {{"success", ops}}, deadline, ctx, true);
    if (snap.revision == 0)
      snap.revision = json_int(reply.value("header", json::object()), "revision");
    for (size_t i = begin; i < end; ++i) {
      if (const json* kv = first_kv(txn_range(reply, i - begin))) snap.values[i] = value_of(*kv);
    }
  }
  if (keys.empty()) {
    const json reply = client_->call("/v3/kv/range", range_of(full("")), deadline, ctx, true);
    snap.revision = json_int(reply.value("header", json::object()), "revision");
  }
  return snap;
}

EtcdStore::Current EtcdStore::read_one(const std::string& key, const Deadline& deadline,
                                       const std::string& ctx) {
  const json reply = client_->call("/v3/kv/range", range_of(full(key)), deadline, ctx, true);
  Current cur;
  cur.revision = json_int(reply.value("header", json::object()), "revision");
  if (const json* kv = first_kv(reply)) {
    cur.value = value_of(*kv);
    cur.mod_revision = json_int(*kv, "mod_revision");
  }
  return cur;
}

// A lost answer is resolved by sending the same transaction again. Every send of it
// carries the same two compares: the key's (its mod revision, or "missing"), and "this
// thread's marker was last written at or before cur.revision". Whichever send applies first
// writes the marker, so no other send of it (nor of this call's earlier transactions) can
// apply after it, and a send whose compare fails reads the marker: one of this call's
// nonces there means that transaction applied. A late one is caught too: it moved the
// marker past the revision the later transaction was built on, so that one fails and
// reads it. At most one transaction of a call applies, and the call returns that one.
// Left open: a call that ends in an error (a deadline, a non-integer value) after an
// unknown outcome on a missing key; that send can still apply if the key is deleted again
// before this thread's next transaction, as can such a send after the destructor deleted
// the markers.
std::optional<size_t> EtcdStore::put_if_unchanged(const std::string& key, Current& cur,
                                                  const std::string& value,
                                                  const Deadline& deadline,
                                                  const std::string& ctx) {
  json compare = {{"key", base64_encode(full(key))}, {"result", "EQUAL"}};
  if (cur.value) {
    compare["target"] = "MOD";
    compare["mod_revision"] = std::to_string(cur.mod_revision);
  } else {
    compare["target"] = "CREATE";  // create revision 0: the key does not exist
    compare["create_revision"] = "0";
  }
  // This thread's reads are linearizable and come after its last write of the marker, so
  // the marker's mod revision is at most cur.revision (0 while it does not exist).
  const std::string marker = marker_key();
  const json marker_compare = {{"key", base64_encode(marker)},
                               {"target", "MOD"},
                               {"result", "LESS"},
                               {"mod_revision", std::to_string(cur.revision + 1)}};
  cur.nonces.push_back(random_hex());
  // When another client got there first, the failure branch reads the key in the same
  // transaction: the retry needs no read of its own.
  const json txn = {
      {"compare", json::array({compare, marker_compare})},
      {"success", json::array({put_of(full(key), value), put_of(marker, cur.nonces.back())})},
      {"failure", json::array({{{"request_range", range_of(full(key))}},
                               {{"request_range", range_of(marker)}}})}};
  markers_written_.store(true);
  json reply;
  std::string unknown;  // why the outcome of an earlier send is unknown ("" while none is)
  auto backoff = kFirstResendBackoff;
  for (int resends = 0;; ++resends) {
    try {
      reply = client_->call("/v3/kv/txn", txn, deadline, ctx, false);
      break;
    } catch (const EtcdOutcomeUnknown& e) {
      if (deadline.expired()) {
        throw StoreTimeout(std::string(e.what()) + "; the deadline passed before it was resolved");
      }
      unknown = e.what();
      DDP_LOG_WARN(unknown +
                   "; sending the same transaction again: its marker tells whether "
                   "the first one applied");
      if (resends > 0) {
        std::this_thread::sleep_for(std::min<Duration>(backoff, deadline.remaining()));
        backoff = std::min(backoff * 2, kMaxResendBackoff);
      }
    } catch (const StoreTimeout& e) {
      if (unknown.empty()) throw;
      throw StoreTimeout(std::string(e.what()) + "; sent before, whether it took effect is " +
                         "unknown (" + unknown + ")");
    } catch (const StoreError& e) {
      if (unknown.empty()) throw;
      throw StoreError(std::string(e.what()) + "; sent before, whether it took effect is " +
                       "unknown (" + unknown + ")");
    }
  }
  if (reply.value("succeeded", false)) return cur.nonces.size() - 1;
  if (const json* kv = first_kv(txn_range(reply, 1))) {
    const std::string seen = value_of(*kv);
    const auto it = std::find(cur.nonces.begin(), cur.nonces.end(), seen);
    if (it != cur.nonces.end()) return static_cast<size_t>(it - cur.nonces.begin());
  }
  cur.value.reset();
  cur.mod_revision = 0;
  cur.revision = json_int(reply.value("header", json::object()), "revision");
  if (const json* kv = first_kv(txn_range(reply, 0))) {
    cur.value = value_of(*kv);
    cur.mod_revision = json_int(*kv, "mod_revision");
  }
  // Many clients on one counter (every node's arrival): each lost race doubles a random
  // pause (1 ms up to 64 ms), so N clients take O(N log N) attempts instead of O(N^2).
  thread_local std::minstd_rand rng{std::random_device{}()};
  ++cur.conflicts;
  const uint32_t window_us = 1000U << std::min(cur.conflicts - 1, 6);
  std::this_thread::sleep_for(std::chrono::microseconds(rng() % window_us));
  return std::nullopt;
}

void EtcdStore::set(const std::string& key, const std::string& value) {
  const json put = {{"key", base64_encode(full(key))}, {"value", base64_encode(value)}};
  client_->call("/v3/kv/put", put, Deadline::after(timeout()), context("set", {key}), true);
}

std::string EtcdStore::get(const std::string& key) {
  const auto deadline = Deadline::after(timeout());
  for (;;) {
    wait_until({key}, deadline, timeout(), "get");
    if (auto v = read_one(key, deadline, context("get", {key})).value) return *v;
  }
}

int64_t EtcdStore::add(const std::string& key, int64_t delta) {
  const auto deadline = Deadline::after(timeout());
  const std::string ctx = context("add", {key});
  Current cur = read_one(key, deadline, ctx);
  std::vector<int64_t> results;  // what each transaction sent would return, as cur.nonces
  for (;;) {
    KeyValueMap scratch;
    if (cur.value) scratch.emplace(key, *cur.value);
    const int64_t result = apply_add(scratch, key, delta);  // ProtocolError as MemoryStore
    // ADD 0 of an existing counter is a read: no write, so readers never race the writers.
    if (delta == 0 && cur.value) return result;
    results.push_back(result);
    if (const auto applied = put_if_unchanged(key, cur, scratch[key], deadline, ctx)) {
      return results[*applied];
    }
  }
}

std::string EtcdStore::compare_set(const std::string& key, const std::string& expected,
                                   const std::string& desired) {
  const auto deadline = Deadline::after(timeout());
  const std::string ctx = context("compare_set", {key});
  const std::string full_key = base64_encode(full(key));
  for (;;) {
    // A VALUE compare never matches a missing key, so "missing" is a CREATE compare.
    json compare = {{"key", full_key}, {"result", "EQUAL"}};
    if (expected.empty()) {
      compare["target"] = "CREATE";
      compare["create_revision"] = "0";
    } else {
      compare["target"] = "VALUE";
      compare["value"] = base64_encode(expected);
    }
    const json txn = {{"compare", json::array({compare})},
                      {"success", json::array({put_of(full(key), desired)})},
                      {"failure", json::array({{{"request_range", range_of(full(key))}}})}};
    // Idempotent: sent twice, the second finds desired and returns it.
    const json reply = client_->call("/v3/kv/txn", txn, deadline, ctx, true);
    if (reply.value("succeeded", false)) return desired;
    const json* kv = first_kv(txn_range(reply, 0));
    if (kv == nullptr) {
      if (!expected.empty()) return expected;  // missing and expected given: as PyTorch
      continue;                                // deleted since the compare: try again
    }
    std::string current = value_of(*kv);
    if (!expected.empty() || !current.empty()) return current;
    // The key holds "" and expected is "": a match (as MemoryStore), on its mod revision.
    Current seen;
    seen.value = current;
    seen.mod_revision = json_int(*kv, "mod_revision");
    seen.revision = json_int(reply.value("header", json::object()), "revision");
    if (put_if_unchanged(key, seen, desired, deadline, ctx).has_value()) return desired;
  }
}

std::unique_ptr<Presence> EtcdStore::open_presence() {
  return std::make_unique<EtcdPresence>(client_, options_.prefix, options_.presence_ttl, timeout());
}

void EtcdStore::end_presence(const std::string& token) {
  try {
    client_->call("/v3/lease/revoke", {{"ID", token}}, Deadline::after(timeout()),
                  "end presence (lease revoke " + token + ")", true);
  } catch (const StoreError& e) {
    // Every survivor that saw the death revokes the same lease: the later ones find it gone
    // (etcd's ErrGRPCLeaseNotFound), which is what they wanted.
    if (std::string_view(e.what()).find("requested lease not found") != std::string_view::npos) {
      return;
    }
    throw;
  }
}

bool EtcdStore::check(const std::vector<std::string>& keys) {
  const Snapshot snap = read(keys, Deadline::after(timeout()), context("check", keys));
  for (const auto& v : snap.values) {
    if (!v) return false;
  }
  return true;
}

void EtcdStore::wait_until(const std::vector<std::string>& keys, const Deadline& deadline,
                           Duration timeout, const char* op) {
  const std::string ctx = context(op, keys);
  for (;;) {
    const Snapshot snap = read(keys, deadline, ctx);
    std::vector<std::string> missing;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!snap.values[i]) missing.push_back(keys[i]);
    }
    if (missing.empty()) return;
    // From the revision read: a put after the read is an event of this watch, never lost.
    const auto result =
        client_->watch_for_put(full(missing.front()), snap.revision + 1, deadline, ctx);
    if (result == EtcdClient::WatchResult::kTimedOut) {
      throw StoreTimeout("etcd " + client_->current_endpoint() + ": " + ctx + " timed out after " +
                         describe_timeout(timeout) + "; missing " + join_keys(missing));
    }
  }
}

void EtcdStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  wait_until(keys, Deadline::after(timeout), timeout, "wait");
}

bool EtcdStore::delete_key(const std::string& key) {
  // Retried after a lost connection: the key is gone either way, though the retry may then
  // answer false for a key the first attempt deleted.
  const json reply = client_->call("/v3/kv/deleterange", range_of(full(key)),
                                   Deadline::after(timeout()), context("delete_key", {key}), true);
  return json_int(reply, "deleted") > 0;
}

namespace {

std::string ticket_dir(const std::string& full_key) {
  return full_key + "/tickets/";
}

json count_of(const std::string& prefix) {
  return {{"key", base64_encode(prefix)},
          {"range_end", base64_encode(prefix_range_end(prefix))},
          {"count_only", true}};
}

}  // namespace

int64_t EtcdStore::take_ticket(const std::string& key) {
  const auto deadline = Deadline::after(timeout());
  const std::string ctx = context("take_ticket", {key});
  // 128 random bits: a collision would merge two tickets into one number.
  thread_local std::random_device device;
  std::string name;
  for (int i = 0; i < 4; ++i) name += std::to_string(device()) + "-";
  const std::string dir = ticket_dir(full(key));
  // Sent again after a lost connection, the put finds its key already there: prev_kv then
  // gives the revision the ticket really has (its create revision), not the re-put's.
  const json put = {{"key", base64_encode(dir + name)}, {"value", ""}, {"prev_kv", true}};
  const json reply = client_->call("/v3/kv/put", put, deadline, ctx, true);
  int64_t revision = json_int(reply.value("header", json::object()), "revision");
  if (const auto prev = reply.find("prev_kv"); prev != reply.end() && prev->is_object()) {
    revision = json_int(*prev, "create_revision");
  }
  // The ticket keys as of that revision (none is ever deleted): those created at or before it.
  // (max_create_revision would not do: etcd applies it after counting.)
  json count = count_of(dir);
  count["revision"] = std::to_string(revision);
  return json_int(client_->call("/v3/kv/range", count, deadline, ctx, true), "count");
}

int64_t EtcdStore::tickets(const std::string& key) {
  return json_int(client_->call("/v3/kv/range", count_of(ticket_dir(full(key))),
                                Deadline::after(timeout()), context("tickets", {key}), true),
                  "count");
}

int64_t EtcdStore::num_keys() {
  const json range = {{"key", base64_encode(options_.prefix)},
                      {"range_end", base64_encode(prefix_range_end(options_.prefix))},
                      {"count_only", true}};
  const json reply = client_->call("/v3/kv/range", range, Deadline::after(timeout()),
                                   context("num_keys", {}), true);
  return json_int(reply, "count");
}

void EtcdStore::append(const std::string& key, const std::string& value) {
  const auto deadline = Deadline::after(timeout());
  const std::string ctx = context("append", {key});
  Current cur = read_one(key, deadline, ctx);
  while (!put_if_unchanged(key, cur, cur.value.value_or("") + value, deadline, ctx).has_value()) {
  }
}

std::vector<std::string> EtcdStore::multi_get(const std::vector<std::string>& keys) {
  const auto deadline = Deadline::after(timeout());
  for (;;) {
    wait_until(keys, deadline, timeout(), "multi_get");
    Snapshot snap = read(keys, deadline, context("multi_get", keys));
    std::vector<std::string> out;
    for (auto& v : snap.values) {
      if (!v) break;  // deleted since the wait: wait again
      out.push_back(std::move(*v));
    }
    if (out.size() == keys.size()) return out;
  }
}

void EtcdStore::multi_set(const std::vector<std::string>& keys,
                          const std::vector<std::string>& values) {
  if (keys.size() != values.size()) {
    throw ConfigError("multi_set: " + std::to_string(keys.size()) + " keys but " +
                      std::to_string(values.size()) + " values");
  }
  if (keys.size() > kMaxTxnOps) {
    throw ConfigError("multi_set of " + std::to_string(keys.size()) + " keys: etcd takes at most " +
                      std::to_string(kMaxTxnOps) + " in one transaction (--max-txn-ops)");
  }
  if (keys.empty()) return;
  json ops = json::array();
  for (size_t i = 0; i < keys.size(); ++i) ops.push_back(put_of(full(keys[i]), values[i]));
  client_->call("/v3/kv/txn", {{"success", ops}}, Deadline::after(timeout()),
                context("multi_set", keys), true);
}

}  // namespace ddp::rendezvous
