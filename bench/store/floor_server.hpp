#pragma once
// store_floor_server's engines: each answers store_bench's load on a listening socket with
// canned replies until killed (floor_epoll.cpp, floor_uring.cpp).
#include <string>

namespace ddp::bench {

struct FloorReplies {
  std::string get;    // what a [SET k v + GET k] round trip gets back
  std::string add;    // what an ADD gets back
  char set_byte = 0;  // SET's command byte in the dialect served (legacy 0, 2.2+ 1)
  // One round trip per read (closed loop): a SET frame rides with its GET; anything else
  // here is an ADD (2.2+: the first one behind the VALIDATE handshake).
  [[nodiscard]] const std::string& to(char first_byte) const {
    return first_byte == set_byte ? get : add;
  }
};

[[noreturn]] void serve_floor_epoll(int listener, const FloorReplies& replies);
[[noreturn]] void serve_floor_uring(int listener, const FloorReplies& replies);

}  // namespace ddp::bench
