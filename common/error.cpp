#include "common/error.hpp"

#include <cstring>

namespace ddp {

std::string errno_text(int err) {
  char buf[256] = {};
  // GNU strerror_r may return a static string instead of filling buf.
  const char* msg = strerror_r(err, buf, sizeof(buf));
  return std::string(msg) + " (errno " + std::to_string(err) + ")";
}

}  // namespace ddp
