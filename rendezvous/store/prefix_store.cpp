#include "rendezvous/store/prefix_store.hpp"

namespace ddp::rendezvous {
namespace {

// The wrapped store's Presence, with every key under the prefix.
class PrefixPresence final : public Presence {
 public:
  PrefixPresence(std::string prefix, std::unique_ptr<Presence> base)
      : prefix_(std::move(prefix)), base_(std::move(base)) {}
  void on_close(const std::string& key, const std::string& value) override {
    base_->on_close(prefix_ + "/" + key, value);
  }
  void set_ephemeral(const std::string& key, const std::string& value) override {
    base_->set_ephemeral(prefix_ + "/" + key, value);
  }
  void clear() override { base_->clear(); }
  [[nodiscard]] std::string token() const override { return base_->token(); }

 private:
  std::string prefix_;
  std::unique_ptr<Presence> base_;
};

}  // namespace

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : Store(base->timeout()), prefix_(std::move(prefix)), base_(std::move(base)) {}

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(full(k));
  return out;
}

void PrefixStore::set(const std::string& key, const std::string& value) {
  base_->set(full(key), value);
}
std::string PrefixStore::get(const std::string& key) {
  return base_->get(full(key));
}
int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return base_->add(full(key), delta);
}
std::string PrefixStore::compare_set(const std::string& key, const std::string& expected,
                                     const std::string& desired) {
  return base_->compare_set(full(key), expected, desired);
}
bool PrefixStore::check(const std::vector<std::string>& keys) {
  return base_->check(full(keys));
}
void PrefixStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  base_->wait(full(keys), timeout);
}
bool PrefixStore::delete_key(const std::string& key) {
  return base_->delete_key(full(key));
}
int64_t PrefixStore::num_keys() {
  return base_->num_keys();
}
void PrefixStore::append(const std::string& key, const std::string& value) {
  base_->append(full(key), value);
}
std::vector<std::string> PrefixStore::multi_get(const std::vector<std::string>& keys) {
  return base_->multi_get(full(keys));
}
void PrefixStore::multi_set(const std::vector<std::string>& keys,
                            const std::vector<std::string>& values) {
  base_->multi_set(full(keys), values);
}
std::string PrefixStore::describe() const {
  return base_->describe() + " prefix '" + prefix_ + "'";
}
void PrefixStore::set_timeout(Duration timeout) {
  Store::set_timeout(timeout);
  base_->set_timeout(timeout);
}

}  // namespace ddp::rendezvous

namespace ddp::rendezvous {

std::unique_ptr<Presence> PrefixStore::open_presence() {
  auto base = base_->open_presence();
  if (!base) return nullptr;
  return std::make_unique<PrefixPresence>(prefix_, std::move(base));
}

}  // namespace ddp::rendezvous
