#pragma once
// A CA, a member certificate for 127.0.0.1 (serverAuth and clientAuth: etcd 3.4's gateway
// dials its own gRPC server with it) and a client certificate, made with openssl in a temp
// dir for the TLS tests (etcd store, etcd rendezvous).
#include <string>

#include "tests/support/temp_dir.hpp"

namespace ddp::test {

struct TestCertificates {
  TestCertificates();  // throws std::runtime_error with openssl's output on failure
  TempDir dir;
  [[nodiscard]] std::string ca() const { return dir.file("ca.crt"); }
  // "server" or "client": <name>.crt and <name>.key.
  [[nodiscard]] std::string cert(const std::string& name) const { return dir.file(name + ".crt"); }
  [[nodiscard]] std::string key(const std::string& name) const { return dir.file(name + ".key"); }
};

}  // namespace ddp::test
