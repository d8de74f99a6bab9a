#include "common/recovery_protocol.hpp"

#include <limits>

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "common/parse_int.hpp"

namespace ddp::recovery {

namespace {

constexpr size_t kMaxQuotedBytes = 64;

std::string quoted(std::string_view token) {
  std::string out = "'";
  out.append(token.substr(0, kMaxQuotedBytes));
  if (token.size() > kMaxQuotedBytes) out += "...";
  return out + "'";
}

bool is_word(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

bool is_value(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) return false;
  }
  return true;
}

bool fail(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
  return false;
}

}  // namespace

const std::string& Message::text(const std::string& key) const {
  auto it = fields.find(key);
  if (it == fields.end()) {
    throw ProtocolError("recovery message '" + type + "' has no " + key + "=: expected one");
  }
  return it->second;
}

int64_t Message::integer(const std::string& key, int64_t min, int64_t max) const {
  const std::string& value = text(key);
  auto parsed = try_parse_int(value, min, max);
  if (!parsed) {
    throw ProtocolError("recovery message '" + type + "': " + key + "=" + quoted(value) +
                        ": expected " + expected_int_text(min, max));
  }
  return *parsed;
}

Message& Message::set(const std::string& key, std::string value) {
  fields[key] = std::move(value);
  return *this;
}

Message& Message::set(const std::string& key, int64_t value) {
  return set(key, std::to_string(value));
}

std::string format(const Message& message) {
  if (!is_word(message.type)) {
    throw ProtocolError("recovery message type " + quoted(message.type) +
                        ": expected a word of letters, digits and '_'");
  }
  std::string line = message.type;
  for (const auto& [key, value] : message.fields) {
    if (!is_word(key) || !is_value(value)) {
      std::string field = key;
      field.append("=").append(value);
      throw ProtocolError("recovery message field " + quoted(field) +
                          ": expected word=value with no whitespace in the value");
    }
    line.append(" ").append(key).append("=").append(value);
  }
  line += '\n';
  if (line.size() > kMaxLineBytes) {
    throw ProtocolError("recovery message '" + message.type + "' is " +
                        std::to_string(line.size()) + " bytes: expected at most " +
                        std::to_string(kMaxLineBytes));
  }
  return line;
}

std::optional<Message> parse(std::string_view line, std::string* error) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (line.size() >= kMaxLineBytes) {
    fail(error, "recovery line of " + std::to_string(line.size()) + " bytes: expected at most " +
                    std::to_string(kMaxLineBytes - 1));
    return std::nullopt;
  }
  Message message;
  size_t pos = 0;
  bool first = true;
  while (pos <= line.size()) {
    size_t end = line.find(' ', pos);
    if (end == std::string_view::npos) end = line.size();
    const std::string_view token = line.substr(pos, end - pos);
    pos = end + 1;
    if (first) {
      if (!is_word(token)) {
        fail(error, "recovery line starts with " + quoted(token) +
                        ": expected a message type (a word of letters, digits and '_')");
        return std::nullopt;
      }
      message.type = token;
      first = false;
      continue;
    }
    const size_t eq = token.find('=');
    if (eq == std::string_view::npos || !is_word(token.substr(0, eq)) ||
        !is_value(token.substr(eq + 1))) {
      fail(error, "bad token " + quoted(token) + " in recovery line '" + message.type +
                      "': expected key=value");
      return std::nullopt;
    }
    message.fields[std::string(token.substr(0, eq))] = std::string(token.substr(eq + 1));
  }
  return message;
}

std::vector<std::pair<std::string, std::string>> place_variables(const WorkerPlace& p) {
  return {{env::kRank, std::to_string(p.rank)},
          {env::kWorldSize, std::to_string(p.world_size)},
          {env::kGroupRank, std::to_string(p.group_rank)},
          {env::kGroupWorldSize, std::to_string(p.group_world_size)},
          {env::kRoleRank, std::to_string(p.role_rank)},
          {env::kRoleWorldSize, std::to_string(p.role_world_size)},
          {env::kMasterAddr, p.master_addr},
          {env::kMasterPort, std::to_string(p.master_port)},
          {env::kRestartCount, std::to_string(p.restart_count)}};
}

Message RoundNotice::to_message() const {
  Message m;
  m.type = std::string(kRound);
  m.set("round", round)
      .set("rank", rank)
      .set("world_size", world_size)
      .set("group_rank", group_rank)
      .set("group_world_size", group_world_size)
      .set("local_world_size", local_world_size)
      .set("role_rank", role_rank)
      .set("role_world_size", role_world_size)
      .set("master_addr", master_addr)
      .set("master_port", master_port)
      .set("restart_count", restart_count);
  if (local_rank >= 0) m.set("local_rank", local_rank);
  return m;
}

RoundNotice RoundNotice::from_message(const Message& m) {
  if (m.type != kRound) {
    throw ProtocolError("recovery message '" + m.type + "': expected 'round'");
  }
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  RoundNotice n;
  n.round = m.integer("round");
  n.world_size = static_cast<int>(m.integer("world_size", 1, kMaxInt));
  n.rank = static_cast<int>(m.integer("rank", 0, n.world_size - 1));
  n.group_world_size = static_cast<int>(m.integer("group_world_size", 1, kMaxInt));
  n.group_rank = static_cast<int>(m.integer("group_rank", 0, n.group_world_size - 1));
  n.local_world_size = static_cast<int>(m.integer("local_world_size", 1, kMaxInt));
  n.role_world_size = static_cast<int>(m.integer("role_world_size", 1, kMaxInt));
  n.role_rank = static_cast<int>(m.integer("role_rank", 0, n.role_world_size - 1));
  n.master_addr = m.text("master_addr");
  n.master_port = static_cast<int>(m.integer("master_port", 1, 65535));
  n.restart_count = static_cast<int>(m.integer("restart_count", 0, kMaxInt));
  if (m.fields.count("local_rank") != 0) {
    n.local_rank = static_cast<int>(m.integer("local_rank", 0, kMaxInt));
  }
  return n;
}

}  // namespace ddp::recovery
