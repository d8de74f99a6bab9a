#pragma once
// A view of another store with every key under "<prefix>/" (as c10d's PrefixStore).
// num_keys() is the wrapped store's count, as PyTorch's.
#include <memory>

#include "rendezvous/store/store.hpp"

namespace ddp::rendezvous {

class PrefixStore final : public Store {
 public:
  // Shares ownership of the wrapped store.
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  int64_t take_ticket(const std::string& key) override { return base_->take_ticket(full(key)); }
  int64_t tickets(const std::string& key) override { return base_->tickets(full(key)); }
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
  [[nodiscard]] std::string describe() const override;
  std::unique_ptr<Presence> open_presence() override;
  void end_presence(const std::string& token) override { base_->end_presence(token); }
  void set_timeout(Duration timeout) override;

  [[nodiscard]] const std::string& prefix() const { return prefix_; }
  [[nodiscard]] Store& base() { return *base_; }

 private:
  [[nodiscard]] std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  [[nodiscard]] std::vector<std::string> full(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace ddp::rendezvous
