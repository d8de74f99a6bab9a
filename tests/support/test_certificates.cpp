#include "tests/support/test_certificates.hpp"

#include <chrono>
#include <stdexcept>
#include <vector>

#include "tests/support/process.hpp"

namespace ddp::test {

TestCertificates::TestCertificates() {
  using namespace std::chrono_literals;
  const std::string ssl = "/usr/bin/openssl";
  const auto run = [](std::vector<std::string> argv) {
    const auto result = run_process(std::move(argv), 30s);
    if (result.exit_code != 0) throw std::runtime_error("openssl failed: " + result.output);
  };
  const std::vector<std::string> ec = {"-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                                       "-nodes"};
  std::vector<std::string> ca_req = {ssl,
                                     "req",
                                     "-x509",
                                     "-days",
                                     "1",
                                     "-subj",
                                     "/CN=ddp-test-ca",
                                     "-keyout",
                                     dir.file("ca.key"),
                                     "-out",
                                     ca()};
  ca_req.insert(ca_req.begin() + 2, ec.begin(), ec.end());
  run(ca_req);
  dir.write("server.ext", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n");
  dir.write("client.ext", "extendedKeyUsage=clientAuth\n");
  for (const std::string name : {"server", "client"}) {
    std::vector<std::string> csr = {ssl,       "req",     "-subj", "/CN=" + name,
                                    "-keyout", key(name), "-out",  dir.file(name + ".csr")};
    csr.insert(csr.begin() + 2, ec.begin(), ec.end());
    run(csr);
    run({ssl, "x509", "-req", "-days", "1", "-in", dir.file(name + ".csr"), "-CA", ca(), "-CAkey",
         dir.file("ca.key"), "-CAcreateserial", "-extfile", dir.file(name + ".ext"), "-out",
         cert(name)});
  }
}

}  // namespace ddp::test
