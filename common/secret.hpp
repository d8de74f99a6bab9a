#pragma once
// The job secret (docs/security.md): loaded from a file only its owner can read, or made
// fresh per job, and handed to workers as hex in their environment. Only the bytes live
// here; proving them to a store is rendezvous/store/auth.hpp's business.
#include <functional>
#include <optional>
#include <string>

namespace ddp {

// Bytes of a fresh secret (getrandom).
inline constexpr size_t kGeneratedSecretBytes = 32;

// The secret in path: its bytes, trailing whitespace (a newline) removed. ConfigError naming
// the file when it cannot be read, is not a regular file, is not owned by this user, has any
// group/other permission bit ("has mode 0644, expected 0600 (chmod 600 PATH)") or is empty.
std::string load_secret_file(const std::string& path);

// count random bytes from the kernel's CSPRNG (getrandom); Error naming what they were for
// when it fails.
std::string random_bytes(size_t count, const std::string& what);
// kGeneratedSecretBytes random bytes (random_bytes).
std::string generate_secret();

// Lower-case hex of bytes, and back (nullopt for odd lengths or non-hex characters).
std::string to_hex(const std::string& bytes);
std::optional<std::string> from_hex(const std::string& hex);

// The secret the environment names: DDPLAUNCH_SECRET (hex) first, else the file in
// DDPLAUNCH_SECRET_FILE; nullopt when neither is set. ConfigError for bad hex or a bad file.
std::optional<std::string> secret_from_env(
    const std::function<std::optional<std::string>(const char*)>& getenv);

}  // namespace ddp
