#include "common/error.hpp"

#include <cerrno>
#include <cstring>

namespace ddp {

std::string errno_text(int err) {
  char buf[256] = {};
  // GNU strerror_r may return a static string instead of filling buf.
  const char* msg = strerror_r(err, buf, sizeof(buf));
  return std::string(msg) + " (errno " + std::to_string(err) + ")";
}

PeerLoss peer_loss_of_errno(int err) {
  switch (err) {
    case ECONNRESET:
    case ECONNREFUSED:
    case ECONNABORTED:
    case EPIPE:
      return PeerLoss::kDeath;
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EHOSTDOWN:
    case ENETDOWN:
      return PeerLoss::kSilence;
    default:
      return PeerLoss::kUnknown;
  }
}

const char* peer_loss_name(PeerLoss loss) {
  switch (loss) {
    case PeerLoss::kDeath:
      return "death";
    case PeerLoss::kSilence:
      return "silence";
    case PeerLoss::kUnknown:
      break;
  }
  return "unknown";
}

}  // namespace ddp
