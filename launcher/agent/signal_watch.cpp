#include "launcher/agent/signal_watch.hpp"

#include <csignal>
#include <utility>

namespace ddp::launcher {

bool ignored_now(int sig) {
  struct sigaction current {};
  return ::sigaction(sig, nullptr, &current) == 0 && current.sa_handler == SIG_IGN;
}

void SignalWatch::start(const std::vector<int>& signals, std::function<void(int)> on_signal) {
  on_signal_ = std::move(on_signal);
  stopped_ = false;
  for (int sig : signals) {
    if (!ignored_now(sig)) signals_.add(sig);
  }
  wait();
}

void SignalWatch::stop() {
  stopped_ = true;
  signals_.cancel();
}

void SignalWatch::wait() {
  signals_.async_wait([this](boost::system::error_code ec, int sig) {
    if (ec) return;  // cancelled by stop()
    on_signal_(sig);
    if (!stopped_) wait();
  });
}

}  // namespace ddp::launcher
