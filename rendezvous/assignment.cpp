#include "rendezvous/assignment.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <random>

#include "common/error.hpp"

namespace ddp::rendezvous {
namespace {

// Parses the next space-separated decimal integer of text from pos; advances pos.
bool next_int(const std::string& text, size_t& pos, int& out) {
  const char* first = text.data() + pos;
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(first, last, out);
  if (ec != std::errc() || ptr == first) return false;
  pos = static_cast<size_t>(ptr - text.data());
  if (pos < text.size()) {
    if (text[pos] != ' ') return false;
    ++pos;
  }
  return true;
}

}  // namespace

std::string make_node_id(const std::string& addr) {
  std::random_device rd;
  const uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id =
      (addr.empty() ? std::string("node") : addr) + ":" + std::to_string(::getpid()) + ":";
  for (int i = 0; i < 8; ++i) id += kHex[(v >> (i * 4)) & 0xF];
  return id;
}

std::string format_record(const NodeRecord& record) {
  return std::to_string(record.nproc) + " " + std::to_string(record.prev_rank) + " " +
         record.node_id;
}

NodeRecord parse_record(const std::string& text) {
  NodeRecord record;
  size_t pos = 0;
  if (!next_int(text, pos, record.nproc) || !next_int(text, pos, record.prev_rank) ||
      record.nproc < 1 || pos >= text.size()) {
    throw ProtocolError("rendezvous node record '" + text +
                        "' does not parse; expected '<nproc >= 1> <prev_rank> <node_id>'");
  }
  record.node_id = text.substr(pos);
  return record;
}

std::string format_assignment(const NodeAssignment& a) {
  return std::to_string(a.group_rank) + " " + std::to_string(a.group_world_size) + " " +
         std::to_string(a.rank_offset) + " " + std::to_string(a.world_size) + " " + a.members;
}

NodeAssignment parse_assignment(const std::string& text) {
  NodeAssignment a;
  size_t pos = 0;
  if (!next_int(text, pos, a.group_rank) || !next_int(text, pos, a.group_world_size) ||
      !next_int(text, pos, a.rank_offset) || !next_int(text, pos, a.world_size) ||
      text.size() - pos != 16 || text.find(' ', pos) != std::string::npos || a.group_rank < 0 ||
      a.group_rank >= a.group_world_size) {
    throw ProtocolError("rendezvous assignment '" + text +
                        "' does not parse; expected '<group_rank> <group_world_size> "
                        "<rank_offset> <world_size> <16 hex digit member digest>'");
  }
  a.members = text.substr(pos);
  return a;
}

std::vector<std::optional<NodeAssignment>> assign_ranks(
    const std::vector<std::optional<NodeRecord>>& arrivals) {
  int members = 0;
  for (const auto& a : arrivals) members += a ? 1 : 0;
  std::vector<std::optional<NodeAssignment>> out(arrivals.size());
  std::vector<int> holder(static_cast<size_t>(members), -1);  // group rank -> arrival slot
  // Pass 1: keep last round's rank where it still fits and nobody earlier took it.
  for (size_t i = 0; i < arrivals.size(); ++i) {
    if (!arrivals[i]) continue;
    const int prev = arrivals[i]->prev_rank;
    if (prev >= 0 && prev < members && holder[static_cast<size_t>(prev)] < 0) {
      holder[static_cast<size_t>(prev)] = static_cast<int>(i);
      out[i] = NodeAssignment{prev, members, 0, 0, ""};
    }
  }
  // Pass 2: the rest fill the holes, lowest rank first, in arrival order.
  size_t next_free = 0;
  for (size_t i = 0; i < arrivals.size(); ++i) {
    if (!arrivals[i] || out[i]) continue;
    while (holder[next_free] >= 0) ++next_free;
    holder[next_free] = static_cast<int>(i);
    out[i] = NodeAssignment{static_cast<int>(next_free), members, 0, 0, ""};
  }
  // RANK offsets: prefix sums of nproc in group-rank order.
  int offset = 0;
  for (int slot : holder) {
    out[static_cast<size_t>(slot)]->rank_offset = offset;
    offset += arrivals[static_cast<size_t>(slot)]->nproc;
  }
  // Membership digest: FNV-1a over the sorted node ids, so arrival order does not matter.
  std::vector<std::string> ids;
  for (const auto& a : arrivals) {
    if (a) ids.push_back(a->node_id);
  }
  std::sort(ids.begin(), ids.end());
  uint64_t hash = 1469598103934665603ULL;
  for (const auto& id : ids) {
    for (char ch : id + '\n') {
      hash = (hash ^ static_cast<unsigned char>(ch)) * 1099511628211ULL;
    }
  }
  char digest[17];
  std::snprintf(digest, sizeof(digest), "%016llx", static_cast<unsigned long long>(hash));
  for (auto& a : out) {
    if (a) {
      a->world_size = offset;
      a->members = digest;
    }
  }
  return out;
}

}  // namespace ddp::rendezvous
