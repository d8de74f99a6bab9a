#pragma once
// The signals the agent handles (--signals_to_handle), delivered on its loop by a signal_set;
// the others keep their default action, as under torchrun. A signal that was ignored when the
// agent started (SIGHUP under nohup) stays ignored, as the user asked.
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <functional>
#include <optional>
#include <vector>

namespace ddp::launcher {

class SignalWatch {
 public:
  explicit SignalWatch(boost::asio::io_context& io) : signals_(io) {}

  // Calls on_signal on the loop for each of signals delivered, until stop().
  void start(const std::vector<int>& signals, std::function<void(int)> on_signal);
  void stop();

  // Notes that the agent received sig (delivered here or not); true when it is the first.
  bool note(int sig) {
    if (first_) return false;
    first_ = sig;
    return true;
  }
  // The first signal the agent received, if any.
  [[nodiscard]] std::optional<int> first() const { return first_; }

 private:
  void wait();

  boost::asio::signal_set signals_;
  std::function<void(int)> on_signal_;
  bool stopped_ = false;
  std::optional<int> first_;
};

// True when sig's disposition in this process is SIG_IGN.
bool ignored_now(int sig);

}  // namespace ddp::launcher
