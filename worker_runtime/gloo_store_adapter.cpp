#include "worker_runtime/gloo_store_adapter.hpp"

namespace ddp::worker_runtime {

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  store_->set(key, std::string(data.begin(), data.end()));
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  // Gloo calls get() right after wait(); waiting here too keeps a bare get() bounded.
  store_->wait({key}, timeout_);
  const std::string value = store_->get(key);
  return {value.begin(), value.end()};
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) {
  store_->wait(keys, timeout_);
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& timeout) {
  store_->wait(keys, timeout);
}

}  // namespace ddp::worker_runtime
