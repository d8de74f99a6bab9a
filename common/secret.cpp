#include "common/secret.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "common/fd.hpp"

namespace ddp {
namespace {

// A secret file larger than this is not a secret (a wrong path, a data file).
constexpr off_t kMaxSecretFileBytes = off_t{64} * 1024;

std::string octal_mode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

}  // namespace

std::string load_secret_file(const std::string& path) {
  const std::string what = "secret file " + path;
  // O_NONBLOCK: a FIFO (or device) put in the file's place is refused below by fstat, not
  // waited on here until somebody writes to it. Reads of a regular file never block anyway.
  const int raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (raw < 0) {
    const int err = errno;
    if (err == ELOOP) throw ConfigError(what + " is a symbolic link; name the file itself");
    throw ConfigError("cannot open " + what + ": " + errno_text(err));
  }
  const Fd fd(raw);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw ConfigError("cannot stat " + what + ": " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) throw ConfigError(what + " is not a regular file");
  if (st.st_uid != ::geteuid()) {
    throw ConfigError(what + " is owned by uid " + std::to_string(st.st_uid) +
                      ", not by this user (uid " + std::to_string(::geteuid()) +
                      "): only its owner may hold the job's secret");
  }
  if ((st.st_mode & 077) != 0) {
    throw ConfigError(what + " has mode " + octal_mode(st.st_mode) + ", expected 0600 (chmod 600 " +
                      path + ")");
  }
  if (st.st_size > kMaxSecretFileBytes) {
    throw ConfigError(what + " holds " + std::to_string(st.st_size) + " bytes, more than the " +
                      std::to_string(kMaxSecretFileBytes) + " a secret may have");
  }
  std::string bytes;
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw ConfigError("cannot read " + what + ": " + errno_text(errno));
    if (n == 0) break;
    bytes.append(buf, static_cast<size_t>(n));
  }
  while (!bytes.empty() && (bytes.back() == '\n' || bytes.back() == '\r' || bytes.back() == ' ' ||
                            bytes.back() == '\t')) {
    bytes.pop_back();
  }
  if (bytes.empty()) throw ConfigError(what + " is empty: write a secret into it");
  return bytes;
}

std::string random_bytes(size_t count, const std::string& what) {
  std::string bytes(count, '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::getrandom(bytes.data() + got, bytes.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("cannot make " + what + ": getrandom: " + errno_text(errno));
    got += static_cast<size_t>(n);
  }
  return bytes;
}

std::string generate_secret() {
  return random_bytes(kGeneratedSecretBytes, "the job secret");
}

std::string to_hex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xF]);
  }
  return out;
}

std::optional<std::string> from_hex(const std::string& hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = digit(hex[i]);
    const int lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>((hi << 4) | lo));
  }
  return out;
}

std::optional<std::string> secret_from_env(
    const std::function<std::optional<std::string>(const char*)>& getenv) {
  if (auto hex = getenv(env::kSecret); hex && !hex->empty()) {
    auto bytes = from_hex(*hex);
    if (!bytes) {
      throw ConfigError(std::string(env::kSecret) + " is not hex (" + std::to_string(hex->size()) +
                        " characters); it holds the job secret as the agent hands it to workers");
    }
    return bytes;
  }
  if (auto path = getenv(env::kSecretFile); path && !path->empty()) return load_secret_file(*path);
  return std::nullopt;
}

}  // namespace ddp
