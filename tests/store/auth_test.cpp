// The store's HMAC-SHA256 (rendezvous/store/auth.cpp): RFC 4231's test vectors, and the same
// MAC as OpenSSL's HMAC() for keys and messages of every length around SHA-256's block.
#include "rendezvous/store/auth.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <catch2/catch.hpp>
#include <random>
#include <string>

#include "common/secret.hpp"

using ddp::rendezvous::auth::hmac_sha256;

namespace {

std::string hex(const std::string& bytes) {
  return ddp::to_hex(bytes);
}

std::string openssl_hmac(const std::string& key, const std::string& message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &length);
  return std::string(reinterpret_cast<const char*>(out), length);
}

}  // namespace

TEST_CASE("HMAC-SHA256 gives RFC 4231's test vectors", "[auth]") {
  // Test case 1: a 20-byte key.
  CHECK(hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2: a key shorter than the digest.
  CHECK(hex(hmac_sha256("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a 131-byte key, longer than a block (hashed first).
  CHECK(hex(hmac_sha256(std::string(131, '\xaa'),
                        "Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST_CASE("HMAC-SHA256 agrees with OpenSSL's HMAC() around the block size", "[auth]") {
  std::mt19937 random(40);
  auto bytes = [&](size_t n) {
    std::string s(n, '\0');
    for (char& c : s) c = static_cast<char>(random() & 0xFF);
    return s;
  };
  for (const size_t key_bytes : {0, 1, 32, 63, 64, 65, 128, 200}) {
    for (const size_t message_bytes : {0, 1, 55, 56, 63, 64, 65, 88, 1000}) {
      const std::string key = bytes(key_bytes);
      const std::string message = bytes(message_bytes);
      INFO("key " << key_bytes << " bytes, message " << message_bytes << " bytes");
      CHECK(hex(hmac_sha256(key, message)) == hex(openssl_hmac(key, message)));
    }
  }
}

TEST_CASE("nonces are fresh and of the promised size", "[auth]") {
  const std::string a = ddp::rendezvous::auth::random_nonce();
  const std::string b = ddp::rendezvous::auth::random_nonce();
  CHECK(a.size() == ddp::rendezvous::auth::kNonceBytes);
  CHECK(a != b);
}
