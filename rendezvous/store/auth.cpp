#include "rendezvous/store/auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "common/error.hpp"

namespace ddp::rendezvous::auth {
namespace {

// Distinct labels: a client's proof can never be replayed as the server's, or back.
constexpr const char* kClientLabel = "ddplaunch-auth-v1 client";
constexpr const char* kServerLabel = "ddplaunch-auth-v1 server";

std::string mac(const std::string& secret, const std::string& label,
                const std::string& server_nonce, const std::string& client_nonce) {
  const std::string message = label + server_nonce + client_nonce;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), out,
           &len) == nullptr) {
    throw Error("HMAC-SHA256 failed (OpenSSL)");
  }
  return std::string(reinterpret_cast<const char*>(out), len);
}

}  // namespace

std::string random_nonce() {
  std::string nonce(kNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(kNonceBytes)) !=
      1) {
    throw Error("cannot make an authentication nonce: RAND_bytes failed (OpenSSL)");
  }
  return nonce;
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
