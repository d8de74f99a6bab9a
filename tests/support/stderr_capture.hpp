#pragma once
// Sends this process's stderr to a file for a scope's duration, so a test can read the lines
// that code under test (a store server, a session) logged.
#include <string>
#include <vector>

namespace ddp::test {

class StderrCapture {
 public:
  StderrCapture();
  ~StderrCapture();  // restores stderr
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  // The lines logged so far.
  [[nodiscard]] std::vector<std::string> lines() const;
  // Waits (bounded, 5 s) until at least n lines were logged, then 100 ms for extras.
  [[nodiscard]] std::vector<std::string> wait_lines(size_t n) const;

 private:
  std::string path_;
  int saved_ = -1;
};

}  // namespace ddp::test
