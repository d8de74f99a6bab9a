#include "tests/support/stderr_capture.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

namespace ddp::test {

StderrCapture::StderrCapture() : path_("/tmp/ddp_stderr_" + std::to_string(::getpid())) {
  std::fflush(stderr);
  saved_ = ::dup(2);
  const int fd = ::open(path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  ::dup2(fd, 2);
  ::close(fd);
}

StderrCapture::~StderrCapture() {
  std::fflush(stderr);
  ::dup2(saved_, 2);
  ::close(saved_);
  ::unlink(path_.c_str());
}

std::vector<std::string> StderrCapture::lines() const {
  std::fflush(stderr);
  std::ifstream in(path_);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::vector<std::string> StderrCapture::wait_lines(size_t n) const {
  using namespace std::chrono_literals;
  for (int i = 0; i < 250 && lines().size() < n; ++i) std::this_thread::sleep_for(20ms);
  std::this_thread::sleep_for(100ms);
  return lines();
}

}  // namespace ddp::test
