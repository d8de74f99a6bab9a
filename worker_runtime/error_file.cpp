#include "worker_runtime/error_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <memory>
#include <typeinfo>

#include "common/env_names.hpp"
#include "common/error_file_format.hpp"
#include "common/log.hpp"

#if __has_include(<cxxabi.h>)
#include <cxxabi.h>
#endif

namespace ddp::worker_runtime {
namespace {

// Filled once at install time so the signal handler only uses async-signal-safe calls.
char g_error_path[4096] = {};

std::string error_path(const std::string& path) {
  if (!path.empty()) {
    return path;
  }
  const char* env_path = std::getenv(env::kErrorFile);
  return env_path != nullptr ? env_path : "";
}

std::string demangle(const char* name) {
#if __has_include(<cxxabi.h>)
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(
      abi::__cxa_demangle(name, nullptr, nullptr, &status), &std::free);
  if (status == 0 && out) {
    return out.get();
  }
#endif
  return name;
}

// Appends s to buf (bounded), escaping nothing: only fixed ASCII goes through here.
void append(char* buf, size_t cap, size_t& len, const char* s) {
  while (*s != '\0' && len + 1 < cap) {
    buf[len++] = *s++;
  }
  buf[len] = '\0';
}

void append_number(char* buf, size_t cap, size_t& len, long long value) {
  char digits[24];
  int n = 0;
  const bool negative = value < 0;
  unsigned long long v = negative ? 0ULL - static_cast<unsigned long long>(value)
                                  : static_cast<unsigned long long>(value);
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0 && n < 23);
  if (negative) {
    append(buf, cap, len, "-");
  }
  char out[24];
  for (int i = 0; i < n; ++i) {
    out[i] = digits[n - 1 - i];
  }
  out[n] = '\0';
  append(buf, cap, len, out);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGABRT:
      return "SIGABRT";
    default:
      return "signal";
  }
}

void fatal_signal_handler(int sig) {
  if (g_error_path[0] != '\0') {
    char doc[512];
    size_t len = 0;
    append(doc, sizeof(doc), len, "{\"message\": {\"message\": \"Fatal signal ");
    append(doc, sizeof(doc), len, signal_name(sig));
    append(doc, sizeof(doc), len, " (");
    append_number(doc, sizeof(doc), len, sig);
    append(doc, sizeof(doc), len, ") in native worker pid ");
    append_number(doc, sizeof(doc), len, ::getpid());
    append(doc, sizeof(doc), len,
           "\", \"extraInfo\": {\"py_callstack\": \"(native worker: no Python stack)\", "
           "\"timestamp\": \"");
    append_number(doc, sizeof(doc), len, static_cast<long long>(::time(nullptr)));
    append(doc, sizeof(doc), len, "\"}}}\n");
    const int fd = ::open(g_error_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      const ssize_t ignored = ::write(fd, doc, len);
      (void)ignored;
      ::close(fd);
    }
  }
  // Re-raise with the default action so the exit status still says "killed by signal".
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

std::string error_file_json(const std::string& message, const std::string& callstack,
                            long long timestamp) {
  return error_file::to_json(message, callstack, timestamp);
}

bool record_error(const std::string& message, const std::string& callstack,
                  const std::string& path) {
  const std::string target = error_path(path);
  if (target.empty()) {
    return false;
  }
  return error_file::write(target, message, callstack);
}

void install_fatal_signal_handlers() {
  const std::string path = error_path("");
  if (path.size() >= sizeof(g_error_path)) {
    return;  // too long to keep in the static buffer; the exit status still tells the agent
  }
  std::memcpy(g_error_path, path.c_str(), path.size() + 1);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) {
    struct sigaction action {};
    action.sa_handler = &fatal_signal_handler;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;
    ::sigaction(sig, &action, nullptr);
  }
}

int run_main(int argc, char** argv, const std::function<int(int, char**)>& fn) {
  install_fatal_signal_handlers();
  std::string message;
  try {
    return fn(argc, argv);
  } catch (const std::exception& e) {
    message = demangle(typeid(e).name()) + ": " + e.what();
  } catch (...) {
    message = "unknown exception (not derived from std::exception)";
  }
  DDP_LOG_ERROR("error: " + message);
  const std::string stack = std::string("native worker ") + (argc > 0 ? argv[0] : "") +
                            " (no Python stack): uncaught " + message;
  record_error(message, stack);
  return 1;
}

}  // namespace ddp::worker_runtime
