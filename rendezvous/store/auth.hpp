#pragma once
// The store's challenge-response (docs/store.md, "Authentication"): both sides prove they hold
// the job secret with HMAC-SHA256 over two fresh nonces, so the secret never crosses the wire
// and a recorded exchange is worth nothing for the next connection. Pure functions.
#include <string>
#include <string_view>

namespace ddp::rendezvous::auth {

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;  // HMAC-SHA256

// kNonceBytes from the kernel's CSPRNG (common/secret's random_bytes); Error when it fails.
std::string random_nonce();

// HMAC-SHA256 (RFC 2104 over SHA-256; RFC 4231 has test vectors).
std::string hmac_sha256(std::string_view key, std::string_view message);

// HMAC-SHA256(secret, "ddplaunch-auth-v1 client" || server_nonce || client_nonce): the
// client's proof.
std::string client_proof(const std::string& secret, const std::string& server_nonce,
                         const std::string& client_nonce);
// HMAC-SHA256(secret, "ddplaunch-auth-v1 server" || server_nonce || client_nonce): the
// server's answer, so the client knows the store holds the secret too.
std::string server_proof(const std::string& secret, const std::string& server_nonce,
                         const std::string& client_nonce);

// Constant-time comparison (CRYPTO_memcmp); false for different lengths.
bool same_mac(const std::string& a, const std::string& b);

}  // namespace ddp::rendezvous::auth
