#include "rendezvous/store/server/store_quota.hpp"

#include "rendezvous/store/server/server_limits.hpp"
#include "rendezvous/store/store.hpp"

namespace ddp::rendezvous {
namespace {

// The longest decimal int64 ADD can store ("-9223372036854775808").
constexpr size_t kMaxAddValueBytes = 20;

}  // namespace

void StoreQuota::admit(const wire::Request& request, const KeyValueMap& data) const {
  using wire::Command;
  size_t grow = 0;  // bytes the request may add, at most
  size_t new_keys = 0;
  auto entry = [&](const std::string& key, size_t new_size) {
    auto it = data.find(key);
    if (it == data.end()) {
      grow += key.size() + new_size;
      ++new_keys;
    } else if (new_size > it->second.size()) {
      grow += new_size - it->second.size();
    }
  };
  switch (request.command) {
    case Command::kSet:
    case Command::kEphemeral:
      entry(request.keys[0], request.values[0].size());
      break;
    case Command::kMultiSet:
      for (size_t i = 0; i < request.keys.size(); ++i)
        entry(request.keys[i], request.values[i].size());
      break;
    case Command::kCompareSet:
      entry(request.keys[0], request.values[1].size());
      break;
    case Command::kAdd:
    case Command::kBarrier:
      entry(request.keys[0], kMaxAddValueBytes);
      break;
    case Command::kQueuePush:  // an item holds its key and value; queues are not keys
      grow += request.keys[0].size() + request.values[0].size();
      break;
    case Command::kAppend: {
      auto it = data.find(request.keys[0]);
      entry(request.keys[0], request.values[0].size() + (it == data.end() ? 0 : it->second.size()));
      break;
    }
    case Command::kOnClose:  // held until the connection closes, then maybe stored
      grow += request.keys[0].size() + request.values[0].size();
      break;
    default:
      return;
  }
  const std::string what =
      std::string(wire::command_name(request.command)) + " of " + join_keys(request.keys);
  if (bytes_ + grow > max_bytes_) {
    throw StoreLimitExceeded(what + ": the store would hold " + std::to_string(bytes_ + grow) +
                             " bytes, over its limit of " + std::to_string(max_bytes_) + " " +
                             limit_bytes_text());
  }
  if (data.size() + new_keys > max_keys_) {
    throw StoreLimitExceeded(what + ": the store would hold " +
                             std::to_string(data.size() + new_keys) + " keys, over its limit of " +
                             std::to_string(max_keys_) + " " + limit_keys_text());
  }
}

void StoreQuota::admit_parked(const wire::Request& request, size_t bytes) const {
  if (bytes_ + bytes <= max_bytes_) return;
  throw StoreLimitExceeded(
      std::string(wire::command_name(request.command)) + " of " + join_keys(request.keys) +
      ": parking it until its keys exist would " + "hold " + std::to_string(bytes_ + bytes) +
      " bytes, over the store's limit of " + std::to_string(max_bytes_) + " " + limit_bytes_text());
}

void StoreQuota::changed(const std::string& key, bool existed, size_t old_size, bool exists,
                         size_t new_size) {
  if (existed) remove(key.size() + old_size);
  if (exists) add(key.size() + new_size);
}

}  // namespace ddp::rendezvous
