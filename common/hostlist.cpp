#include "common/hostlist.hpp"

#include <charconv>
#include <cstdint>
#include <optional>

#include "common/error.hpp"

namespace ddp {
namespace {

class HostlistParser {
 public:
  explicit HostlistParser(std::string_view text) : text_(text) {}

  std::vector<std::string> parse() {
    if (text_.empty()) fail(0, "a non-empty hostlist");
    std::vector<std::string> hosts;
    while (true) {
      const size_t item_start = pos_;
      std::vector<std::string> item{""};
      if (auto address = bracketed_address()) item = {*address};
      while (pos_ < text_.size() && text_[pos_] != ',') {
        if (text_[pos_] == '[') {
          item = product(item, bracket());
        } else if (text_[pos_] == ']') {
          fail(pos_, "'[' before ']'");
        } else {
          for (auto& h : item) h += text_[pos_];
          ++pos_;
        }
      }
      if (pos_ == item_start) fail(pos_, "a host name (empty item)");
      if (hosts.size() + item.size() > kMaxHostlistHosts) too_many();
      hosts.insert(hosts.end(), item.begin(), item.end());
      if (pos_ == text_.size()) return hosts;
      ++pos_;  // ','
      if (pos_ == text_.size()) fail(pos_, "a host name after ','");
    }
  }

 private:
  // A whole item "[fd00::1]" is an IPv6 address, not a range (ranges hold no ':'): returns
  // it without brackets and moves past it; nullopt for anything else.
  std::optional<std::string> bracketed_address() {
    if (pos_ >= text_.size() || text_[pos_] != '[') return std::nullopt;
    const size_t close = text_.find(']', pos_);
    if (close == std::string_view::npos) return std::nullopt;
    const std::string_view inside = text_.substr(pos_ + 1, close - pos_ - 1);
    if (inside.find(':') == std::string_view::npos) return std::nullopt;
    if (close + 1 < text_.size() && text_[close + 1] != ',') {
      fail(close + 1, "',' after the IPv6 address");
    }
    pos_ = close + 1;
    return std::string(inside);
  }

  // Parses "[a-b,c,...]" at pos_; returns the suffixes in order.
  std::vector<std::string> bracket() {
    const size_t open = pos_++;
    std::vector<std::string> out;
    while (true) {
      std::string lo = digits("a number");
      if (pos_ < text_.size() && text_[pos_] == '-') {
        ++pos_;
        const size_t hi_pos = pos_;
        std::string hi = digits("the upper bound of a range");
        const uint64_t a = to_number(lo), b = to_number(hi);
        if (b < a) fail(hi_pos, "an upper bound >= " + lo + " (got " + hi + ")");
        if (b - a + 1 > kMaxHostlistHosts) too_many();
        for (uint64_t v = a; v <= b; ++v) out.push_back(padded(v, lo.size()));
      } else {
        out.push_back(lo);
      }
      if (pos_ >= text_.size()) fail(open, "a ']' closing this '['");
      if (text_[pos_] == ']') {
        ++pos_;
        return out;
      }
      if (text_[pos_] != ',') fail(pos_, "',', '-' or ']' inside brackets");
      ++pos_;
    }
  }

  std::string digits(const std::string& what) {
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    if (pos_ == start) fail(start, what);
    if (pos_ - start > 18) fail(start, "a number of at most 18 digits");
    return std::string(text_.substr(start, pos_ - start));
  }

  static uint64_t to_number(const std::string& s) {
    uint64_t v = 0;
    std::from_chars(s.data(), s.data() + s.size(), v);
    return v;
  }

  // v printed with at least width digits when the lower bound had leading zeros.
  static std::string padded(uint64_t v, size_t width) {
    std::string s = std::to_string(v);
    if (s.size() < width) s.insert(0, width - s.size(), '0');
    return s;
  }

  std::vector<std::string> product(const std::vector<std::string>& prefixes,
                                   const std::vector<std::string>& suffixes) const {
    if (prefixes.size() * suffixes.size() > kMaxHostlistHosts) too_many();
    std::vector<std::string> out;
    out.reserve(prefixes.size() * suffixes.size());
    for (const auto& p : prefixes) {
      for (const auto& s : suffixes) out.push_back(p + s);
    }
    return out;
  }

  [[noreturn]] void fail(size_t at, const std::string& expected) const {
    throw ConfigError("hostlist '" + std::string(text_) + "': expected " + expected +
                      " at position " + std::to_string(at) +
                      " (syntax: name[01-04,07],other[1-2])");
  }

  [[noreturn]] void too_many() const {
    throw ConfigError("hostlist '" + std::string(text_) + "' expands to more than " +
                      std::to_string(kMaxHostlistHosts) + " hosts");
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view hostlist) {
  return HostlistParser(hostlist).parse();
}

std::string first_host(std::string_view hostlist) {
  return expand_hostlist(hostlist).front();
}

}  // namespace ddp
