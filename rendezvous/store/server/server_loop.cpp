#include "rendezvous/store/server/server_loop.hpp"

#include "common/log.hpp"

namespace ddp::rendezvous {

void log_line(const std::string& /*log_name*/, const std::string& what) {
  DDP_LOG_WARN(what);
}

}  // namespace ddp::rendezvous
