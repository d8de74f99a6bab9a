#pragma once
// A store that hands every call to another one: the base of decorators (a hook on waits, a
// fault a test injects, a counter a benchmark keeps), which override only what they change.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rendezvous/store/store.hpp"

namespace ddp::rendezvous {

class ForwardingStore : public Store {
 public:
  // Shares ownership of base; takes its default timeout.
  explicit ForwardingStore(std::shared_ptr<Store> base)
      : Store(base->timeout()), base_(std::move(base)) {}

  void set(const std::string& key, const std::string& value) override { base_->set(key, value); }
  std::string get(const std::string& key) override { return base_->get(key); }
  int64_t add(const std::string& key, int64_t delta) override { return base_->add(key, delta); }
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override {
    return base_->compare_set(key, expected, desired);
  }
  bool check(const std::vector<std::string>& keys) override { return base_->check(keys); }
  using Store::wait;
  void wait(const std::vector<std::string>& keys, Duration timeout) override {
    base_->wait(keys, timeout);
  }
  bool delete_key(const std::string& key) override { return base_->delete_key(key); }
  int64_t num_keys() override { return base_->num_keys(); }
  void append(const std::string& key, const std::string& value) override {
    base_->append(key, value);
  }
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override {
    return base_->multi_get(keys);
  }
  void multi_set(const std::vector<std::string>& keys,
                 const std::vector<std::string>& values) override {
    base_->multi_set(keys, values);
  }
  [[nodiscard]] std::string describe() const override { return base_->describe(); }
  std::unique_ptr<Presence> open_presence() override { return base_->open_presence(); }
  void end_presence(const std::string& token) override { base_->end_presence(token); }
  int64_t take_ticket(const std::string& key) override { return base_->take_ticket(key); }
  int64_t tickets(const std::string& key) override { return base_->tickets(key); }
  void set_timeout(Duration timeout) override {
    Store::set_timeout(timeout);
    base_->set_timeout(timeout);
  }

 protected:
  [[nodiscard]] Store& base() const { return *base_; }
  [[nodiscard]] const std::shared_ptr<Store>& shared_base() const { return base_; }

 private:
  std::shared_ptr<Store> base_;
};

}  // namespace ddp::rendezvous
