#include "rendezvous/store/auth.hpp"

// SHA-256 through OpenSSL's low-level functions. Its EVP layer (HMAC(), EVP_MAC, even the
// one-shot SHA256()) starts OpenSSL's provider machinery on first use: 2.2 MiB more resident
// memory in every agent, for one HMAC per store connection. SHA256_Init/Update/Final are the
// same digest code without it; OpenSSL 3 deprecates them (they are still there), hence the
// define, which must come before the first OpenSSL header.
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <array>
#include <initializer_list>

#include "common/secret.hpp"

namespace ddp::rendezvous::auth {
namespace {

// Distinct labels: a client's proof can never be replayed as the server's, or back.
constexpr const char* kClientLabel = "ddplaunch-auth-v1 client";
constexpr const char* kServerLabel = "ddplaunch-auth-v1 server";
constexpr size_t kBlockBytes = 64;  // SHA-256's block, the HMAC key length (RFC 2104)

std::string sha256(std::initializer_list<std::string_view> parts) {
  SHA256_CTX context;
  SHA256_Init(&context);
  for (const std::string_view part : parts) SHA256_Update(&context, part.data(), part.size());
  std::array<unsigned char, SHA256_DIGEST_LENGTH> digest{};
  SHA256_Final(digest.data(), &context);
  OPENSSL_cleanse(&context, sizeof context);  // its state came from the key
  return std::string(reinterpret_cast<const char*>(digest.data()), digest.size());
}

std::string mac(const std::string& secret, const std::string& label,
                const std::string& server_nonce, const std::string& client_nonce) {
  return hmac_sha256(secret, label + server_nonce + client_nonce);
}

}  // namespace

std::string hmac_sha256(std::string_view key, std::string_view message) {
  // H((K' ^ opad) || H((K' ^ ipad) || message)), K' the key (or its hash when longer than a
  // block) padded with zeros to a block.
  std::string block = key.size() > kBlockBytes ? sha256({key}) : std::string(key);
  block.resize(kBlockBytes, '\0');
  std::string inner_pad(kBlockBytes, '\0');
  std::string outer_pad(kBlockBytes, '\0');
  for (size_t i = 0; i < kBlockBytes; ++i) {
    inner_pad[i] = static_cast<char>(block[i] ^ 0x36);
    outer_pad[i] = static_cast<char>(block[i] ^ 0x5c);
  }
  OPENSSL_cleanse(block.data(), block.size());
  std::string result = sha256({outer_pad, sha256({inner_pad, message})});
  OPENSSL_cleanse(inner_pad.data(), inner_pad.size());
  OPENSSL_cleanse(outer_pad.data(), outer_pad.size());
  return result;
}

std::string random_nonce() {
  return random_bytes(kNonceBytes, "an authentication nonce");
}

std::string client_proof(const std::string& secret, const std::string& server_nonce,
                         const std::string& client_nonce) {
  return mac(secret, kClientLabel, server_nonce, client_nonce);
}

std::string server_proof(const std::string& secret, const std::string& server_nonce,
                         const std::string& client_nonce) {
  return mac(secret, kServerLabel, server_nonce, client_nonce);
}

bool same_mac(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace ddp::rendezvous::auth
