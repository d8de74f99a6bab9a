#pragma once
// Progress lines of the rendezvous ("2/4 nodes joined"): to the caller's sink when it gave
// one (the agent prefixes and routes them), else to stderr.
#include <functional>
#include <iostream>
#include <string>

namespace ddp::rendezvous {

using LogSink = std::function<void(const std::string&)>;

// Writes one line to sink, or to stderr as "[ddplaunch] <line>" when sink is empty.
inline void rdzv_log(const LogSink& sink, const std::string& line) {
  if (sink) {
    sink(line);
  } else {
    std::cerr << "[ddplaunch] " + line + "\n" << std::flush;
  }
}

}  // namespace ddp::rendezvous
