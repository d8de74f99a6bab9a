#pragma once
// PyTorch TCPStore semantics shared by MemoryStore and the TCP server, so both agree
// byte for byte on what ADD and COMPARE_SET store and return.
#include <cstdint>
#include <string>
#include <unordered_map>

namespace ddp::rendezvous {

using KeyValueMap = std::unordered_map<std::string, std::string>;

// ADD: the value is decimal ASCII (missing = 0); stores and returns value + delta.
// Throws ProtocolError when the stored value is not an integer or the sum overflows.
int64_t apply_add(KeyValueMap& data, const std::string& key, int64_t delta);

// COMPARE_SET as PyTorch: missing key + empty expected -> set desired; missing key +
// non-empty expected -> return expected unchanged; match -> set desired; else current.
std::string apply_compare_set(KeyValueMap& data, const std::string& key,
                              const std::string& expected, const std::string& desired);

}  // namespace ddp::rendezvous
