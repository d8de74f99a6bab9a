#include "rendezvous/store/server/server_state.hpp"

#include <algorithm>

#include "common/error.hpp"
#include "rendezvous/store/store.hpp"

namespace ddp::rendezvous {

using wire::Command;

void ServerState::execute(const std::shared_ptr<ReplyChannel>& conn, wire::Request&& request) {
  quota_.admit(request, data_);
  std::string out;
  switch (request.command) {
    case Command::kValidate:
      if (request.nonce != wire::kValidationMagic) {
        throw ProtocolError("VALIDATE with magic " + std::to_string(request.nonce) + ", expected " +
                            std::to_string(wire::kValidationMagic));
      }
      return;
    case Command::kPing:
      wire::put_u32(out, request.nonce);
      break;
    case Command::kSet:
      store(request.keys[0], std::move(request.values[0]));
      return;
    case Command::kCompareSet: {
      const std::string& key = request.keys[0];
      auto it = data_.find(key);
      const bool existed = it != data_.end();
      const std::string old_value = existed ? it->second : std::string();
      const std::string now = apply_compare_set(data_, key, request.values[0], request.values[1]);
      bool exists = false;
      const size_t new_size = value_size(key, exists);
      quota_.changed(key, existed, old_value.size(), exists, new_size);
      wire::put_string(out, now);
      conn->send(out);
      const bool created = !existed && data_.count(key) > 0;
      if (created || (existed && old_value != now)) {
        notify_watchers(key, created ? wire::kWatchKeyCreated : wire::kWatchKeyUpdated, old_value,
                        now);
      }
      if (created) key_created(key);
      return;
    }
    case Command::kAdd: {
      const std::string& key = request.keys[0];
      auto it = data_.find(key);
      const bool existed = it != data_.end();
      // The old value is only needed for legacy WATCH_KEY notifications.
      const std::string old_value = existed && !watchers_.empty() ? it->second : std::string();
      const size_t old_size = existed ? it->second.size() : 0;
      const int64_t value = apply_add(data_, key, request.delta);
      quota_.changed(key, existed, old_size, true, data_[key].size());
      wire::put_i64(out, value);
      conn->send(out);
      notify_watchers(key, existed ? wire::kWatchKeyUpdated : wire::kWatchKeyCreated, old_value,
                      data_[key]);
      if (!existed) key_created(key);
      return;
    }
    case Command::kCheck: {
      const bool ready =
          std::all_of(request.keys.begin(), request.keys.end(),
                      [&](const std::string& k) { return present(k, Command::kCheck); });
      wire::put_u8(out, ready ? wire::kCheckReady : wire::kCheckNotReady);
      break;
    }
    case Command::kGet:
    case Command::kWait:
    case Command::kMultiGet:
      wait_or_reply(conn, std::move(request));
      return;
    case Command::kGetNumKeys:
      wire::put_i64(out, static_cast<int64_t>(count_in(conn->key_scope())));
      break;
    case Command::kListKeys: {
      const auto keys = keys_in(conn->key_scope());
      wire::put_i64(out, static_cast<int64_t>(keys.size()));
      for (const auto& key : keys) wire::put_string(out, key);
      break;
    }
    case Command::kQueuePush: {
      const std::string& key = request.keys[0];
      quota_.add(key.size() + request.values[0].size());
      queues_[key].push_back(std::move(request.values[0]));
      queue_pushed(key);
      return;
    }
    case Command::kQueuePop: {
      auto it = queues_.find(request.keys[0]);
      const size_t length = it == queues_.end() ? 0 : it->second.size();
      wire::put_i64(out, static_cast<int64_t>(length));
      if (length > 0) {
        wire::put_string(out, it->second.front());
        quota_.remove(it->first.size() + it->second.front().size());
        it->second.pop_front();
        if (it->second.empty()) queues_.erase(it);
      }
      break;
    }
    case Command::kQueueLen: {
      auto it = queues_.find(request.keys[0]);
      wire::put_i64(out, static_cast<int64_t>(it == queues_.end() ? 0 : it->second.size()));
      break;
    }
    case Command::kBarrier:
      barrier(conn, std::move(request));
      return;
    case Command::kWatchKey: {
      const std::string& key = request.keys[0];
      auto wit = watchers_.find(key);
      // Watching twice is watching once: repeated WATCH_KEYs must not grow the list.
      const bool known = wit != watchers_.end() &&
                         std::any_of(wit->second.begin(), wit->second.end(),
                                     [&](const auto& w) { return w.lock().get() == conn.get(); });
      if (!known) {
        // The key is held until the connection closes (disconnect), so it counts as held.
        quota_.admit_parked(request, key.size());
        quota_.add(key.size());
        watchers_[key].push_back(conn);
        watched_[conn.get()].push_back(key);
      }
    }
      wire::put_u8(out, wire::kWatchCallbackRegistered);
      break;
    case Command::kDeleteKey:
      wire::put_i64(out, erase(request.keys[0]) ? 1 : 0);
      break;
    case Command::kOnClose: {
      auto& actions = close_actions(*conn, request);
      quota_.add(request.keys[0].size() + request.values[0].size());
      actions.on_close.emplace_back(std::move(request.keys[0]), std::move(request.values[0]));
      wire::put_u8(out, wire::kCloseActionDone);
      break;
    }
    case Command::kEphemeral: {
      auto& actions = close_actions(*conn, request);
      actions.ephemeral.push_back(request.keys[0]);
      store(request.keys[0], std::move(request.values[0]));
      wire::put_u8(out, wire::kCloseActionDone);
      break;
    }
    case Command::kClearCloseActions:
      if (auto it = close_actions_.find(conn.get()); it != close_actions_.end()) {
        const CloseActions actions = std::move(it->second);
        close_actions_.erase(it);
        for (const auto& [key, value] : actions.on_close) quota_.remove(key.size() + value.size());
        for (const auto& key : actions.ephemeral) erase(key);
      }
      wire::put_u8(out, wire::kCloseActionDone);
      break;
    case Command::kAuthChallenge:
    case Command::kAuthProof:
    case Command::kWorkerNamespace:
      // StoreSession answers these (AccessPolicy); they never reach the key-value state.
      throw ProtocolError(std::string(wire::command_name(request.command)) +
                          " is not a key-value request");
    case Command::kAppend: {
      const std::string& key = request.keys[0];
      auto it = data_.find(key);
      if (it == data_.end()) {
        store(key, std::move(request.values[0]));
      } else {
        const std::string old_value = watchers_.empty() ? std::string() : it->second;
        it->second += request.values[0];
        quota_.add(request.values[0].size());
        notify_watchers(key, wire::kWatchKeyAppended, old_value, it->second);
      }
      return;
    }
    case Command::kMultiSet:
      for (size_t i = 0; i < request.keys.size(); ++i) {
        store(request.keys[i], std::move(request.values[i]));
      }
      return;
    case Command::kCancelWait:
      disconnect_wait(*conn);
      wire::put_u8(out, wire::kWaitCanceled);
      break;
  }
  conn->send(out);
}

void ServerState::store(const std::string& key, std::string value) {
  auto [it, inserted] = data_.try_emplace(key);
  quota_.changed(key, !inserted, it->second.size(), true, value.size());
  std::string old_value;
  if (!inserted && !watchers_.empty()) old_value = std::move(it->second);
  it->second = std::move(value);
  notify_watchers(key, inserted ? wire::kWatchKeyCreated : wire::kWatchKeyUpdated, old_value,
                  it->second);
  if (inserted) key_created(key);
}

bool ServerState::erase(const std::string& key) {
  auto it = data_.find(key);
  if (it == data_.end()) return false;
  const std::string old_value = std::move(it->second);
  data_.erase(it);
  quota_.remove(key.size() + old_value.size());
  notify_watchers(key, wire::kWatchKeyDeleted, old_value, {});
  return true;
}

ServerState::CloseActions& ServerState::close_actions(const ReplyChannel& conn,
                                                      const wire::Request& request) {
  auto& actions = close_actions_[&conn];
  if (actions.on_close.size() + actions.ephemeral.size() >= wire::kMaxCloseActions) {
    throw ProtocolError(std::string(wire::command_name(request.command)) + " of " +
                        join_keys(request.keys) + ": the connection already holds " +
                        std::to_string(wire::kMaxCloseActions) +
                        " close actions, the most one connection may hold");
  }
  return actions;
}

void ServerState::wait_or_reply(const std::shared_ptr<ReplyChannel>& conn, wire::Request&& request,
                                bool recheck) {
  if (auto it = pending_.find(conn.get()); it != pending_.end()) {
    // A 1.13 client abandons a timed-out WAIT without CANCEL_WAIT and simply asks again:
    // the new request replaces it, as nobody reads its reply any more. A parked GET is
    // different: its reply is still owed, so a second one cannot be answered in order.
    if (it->second.request.command != Command::kWait) {
      throw ProtocolError(std::string(wire::command_name(request.command)) + " while a " +
                          wire::command_name(it->second.request.command) + " of " +
                          join_keys(it->second.request.keys) + " is still waiting for its keys");
    }
    disconnect_wait(*conn);
  }
  size_t missing = 0;
  for (const auto& k : request.keys) {
    if (!present(k, request.command)) ++missing;
  }
  if (missing == 0) {
    reply_ready(*conn, request);
    return;
  }
  // A parked request's keys stay in memory until it is answered: they count as held bytes.
  size_t bytes = 0;
  for (const auto& k : request.keys) bytes += k.size();
  if (!recheck) quota_.admit_parked(request, bytes);
  quota_.add(bytes);
  const uint64_t ticket = next_ticket_++;
  for (const auto& k : request.keys) {
    if (!present(k, request.command)) waiters_[k].push_back({conn.get(), ticket});
  }
  pending_.emplace(conn.get(), Pending{ticket, conn, std::move(request), missing, bytes});
}

void ServerState::reply_ready(ReplyChannel& conn, const wire::Request& request) {
  std::string out;
  if (request.command == Command::kWait) {
    wire::put_u8(out, wire::kWaitStopWaiting);
  } else {
    for (const auto& k : request.keys) wire::put_string(out, data_.at(k));
  }
  conn.send(out);
}

void ServerState::key_created(const std::string& key) {
  auto wit = waiters_.find(key);
  if (wit == waiters_.end()) return;
  std::vector<WaitEntry> entries = std::move(wit->second);
  waiters_.erase(wit);
  for (const auto& entry : entries) {
    auto pit = pending_.find(entry.conn);
    if (pit == pending_.end() || pit->second.ticket != entry.ticket) continue;
    if (--pit->second.missing > 0) continue;
    auto conn = pit->second.conn.lock();
    wire::Request request = std::move(pit->second.request);
    quota_.remove(pit->second.bytes);
    pending_.erase(pit);
    // Re-check: a key counted as created may have been deleted again since.
    if (conn) wait_or_reply(conn, std::move(request), /*recheck=*/true);
  }
}

void ServerState::disconnect_wait(ReplyChannel& conn) {
  auto pit = pending_.find(&conn);
  if (pit == pending_.end()) return;
  auto& lists = pit->second.request.command == Command::kBarrier ? barriers_ : waiters_;
  for (const auto& k : pit->second.request.keys) {
    auto wit = lists.find(k);
    if (wit == lists.end()) continue;
    auto& v = wit->second;
    v.erase(std::remove_if(v.begin(), v.end(), [&](const WaitEntry& e) { return e.conn == &conn; }),
            v.end());
    if (v.empty()) lists.erase(wit);
  }
  quota_.remove(pit->second.bytes);
  pending_.erase(pit);
}

void ServerState::disconnect(ReplyChannel& conn, bool run_close_actions) {
  disconnect_wait(conn);
  // Its watches go now: a key nobody changes again must not keep them (and their bytes).
  if (auto wit = watched_.find(&conn); wit != watched_.end()) {
    for (const auto& key : wit->second) {
      quota_.remove(key.size());
      auto lit = watchers_.find(key);
      if (lit == watchers_.end()) continue;
      auto& list = lit->second;
      list.erase(std::remove_if(list.begin(), list.end(),
                                [&](const std::weak_ptr<ReplyChannel>& w) {
                                  const auto held = w.lock();
                                  return held == nullptr || held.get() == &conn;
                                }),
                 list.end());
      if (list.empty()) watchers_.erase(lit);
    }
    watched_.erase(wit);
  }
  auto it = close_actions_.find(&conn);
  if (it == close_actions_.end()) return;
  const CloseActions actions = std::move(it->second);
  close_actions_.erase(it);
  for (const auto& [key, value] : actions.on_close) quota_.remove(key.size() + value.size());
  if (!run_close_actions) return;
  // Ephemeral keys go first, so whoever an ON_CLOSE key wakes finds them gone already.
  for (const auto& key : actions.ephemeral) erase(key);
  for (const auto& [key, value] : actions.on_close) {
    if (data_.count(key) == 0) store(key, value);
  }
}

size_t ServerState::value_size(const std::string& key, bool& existed) const {
  auto it = data_.find(key);
  existed = it != data_.end();
  return existed ? it->second.size() : 0;
}

bool ServerState::waiting(const ReplyChannel& conn) const {
  return pending_.count(&conn) > 0;
}

void ServerState::notify_watchers(const std::string& key, uint8_t kind, std::string_view old_value,
                                  std::string_view new_value) {
  if (watchers_.empty()) return;
  auto it = watchers_.find(key);
  if (it == watchers_.end()) return;
  auto& list = it->second;
  list.erase(std::remove_if(list.begin(), list.end(),
                            [](const std::weak_ptr<ReplyChannel>& w) { return w.expired(); }),
             list.end());
  for (const auto& w : list) {
    auto c = w.lock();
    if (!c) continue;
    // A scoped watcher named the key without its scope, and is told of it so.
    const std::string_view scope = c->key_scope();
    std::string out;
    wire::put_u8(out, kind);
    wire::put_string(out, std::string_view(key).substr(std::min(scope.size(), key.size())));
    wire::put_string(out, old_value);
    wire::put_string(out, new_value);
    c->send(out);
  }
  if (list.empty()) watchers_.erase(it);
}

bool ServerState::present(const std::string& key, Command command) const {
  if (data_.count(key) > 0) return true;
  if (command != Command::kWait && command != Command::kCheck) return false;
  auto it = queues_.find(key);
  return it != queues_.end() && !it->second.empty();
}

void ServerState::queue_pushed(const std::string& key) {
  auto wit = waiters_.find(key);
  if (wit == waiters_.end()) return;
  auto& entries = wit->second;
  for (auto e = entries.begin(); e != entries.end(); ++e) {
    auto pit = pending_.find(e->conn);
    if (pit == pending_.end() || pit->second.ticket != e->ticket ||
        pit->second.request.command != Command::kWait) {
      continue;  // a GET is answered by a key, never by a queue item
    }
    // One item counts for one waiter: the next push serves the next (queue_pop(block)).
    entries.erase(e);
    if (entries.empty()) waiters_.erase(wit);
    if (--pit->second.missing > 0) return;
    auto conn = pit->second.conn.lock();
    quota_.remove(pit->second.bytes);
    pending_.erase(pit);
    if (conn) reply_ready(*conn, wire::Request{Command::kWait, {}, {}, 0, 0});
    return;
  }
}

void ServerState::barrier(const std::shared_ptr<ReplyChannel>& conn, wire::Request&& request) {
  const std::string key = request.keys[0];
  const int64_t world_size = request.delta;
  const bool existed = data_.count(key) > 0;
  const size_t old_size = existed ? data_[key].size() : 0;
  const int64_t count = apply_add(data_, key, 1);
  quota_.changed(key, existed, old_size, true, data_[key].size());
  if (!existed) key_created(key);
  if (count < world_size) {
    if (pending_.count(conn.get()) > 0) disconnect_wait(*conn);
    const uint64_t ticket = next_ticket_++;
    quota_.add(key.size());
    barriers_[key].push_back({conn.get(), ticket});
    pending_.emplace(conn.get(), Pending{ticket, conn, std::move(request), 1, key.size()});
    return;
  }
  std::string out;
  wire::put_u8(out, wire::kWaitStopWaiting);
  conn->send(out);
  auto bit = barriers_.find(key);
  if (bit == barriers_.end()) return;
  const std::vector<WaitEntry> entries = std::move(bit->second);
  barriers_.erase(bit);
  for (const auto& entry : entries) {
    auto pit = pending_.find(entry.conn);
    if (pit == pending_.end() || pit->second.ticket != entry.ticket) continue;
    auto waiter = pit->second.conn.lock();
    quota_.remove(pit->second.bytes);
    pending_.erase(pit);
    if (waiter) waiter->send(out);
  }
}

std::vector<std::string> ServerState::keys_in(std::string_view scope) const {
  std::vector<std::string> keys;
  for (const auto& [key, value] : data_) {
    if (key.size() >= scope.size() && key.compare(0, scope.size(), scope) == 0) {
      keys.push_back(key.substr(scope.size()));
    }
  }
  return keys;
}

size_t ServerState::count_in(std::string_view scope) const {
  if (scope.empty()) return data_.size();
  return static_cast<size_t>(std::count_if(data_.begin(), data_.end(), [&](const auto& kv) {
    return kv.first.size() >= scope.size() && kv.first.compare(0, scope.size(), scope) == 0;
  }));
}

}  // namespace ddp::rendezvous
