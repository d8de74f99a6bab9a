// The etcd gateway's pure helpers: base64, prefix ranges, int64 fields, endpoints.
#include "rendezvous/store/etcd/etcd_codec.hpp"

#include <catch2/catch.hpp>
#include <string>

#include "common/error.hpp"

using namespace ddp::rendezvous;

TEST_CASE("etcd codec: base64 round-trips every length and byte", "[etcd]") {
  CHECK(base64_encode("") == "");
  CHECK(base64_encode("a") == "YQ==");
  CHECK(base64_encode("ab") == "YWI=");
  CHECK(base64_encode("abc") == "YWJj");
  CHECK(base64_encode("/ddplaunch/") == "L2RkcGxhdW5jaC8=");
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  for (size_t n = 0; n <= all.size(); n += 37) {
    const std::string bytes = all.substr(0, n) + std::string("\0\xff", 2);
    CHECK(base64_decode(base64_encode(bytes)) == bytes);
  }
  CHECK(base64_decode("YWI=") == "ab");
}

TEST_CASE("etcd codec: text that is not base64 is a ProtocolError", "[etcd]") {
  CHECK_THROWS_AS(base64_decode("abc"), ddp::ProtocolError);
  CHECK_THROWS_AS(base64_decode("a*cd"), ddp::ProtocolError);
  CHECK_THROWS_AS(base64_decode("Y==="
                                "YWJj"),
                  ddp::ProtocolError);  // padding mid-text
  CHECK_THROWS_AS(base64_decode("Y==="), ddp::ProtocolError);
}

TEST_CASE("etcd codec: a prefix's range end", "[etcd]") {
  CHECK(prefix_range_end("/ddplaunch/job/") == "/ddplaunch/job0");
  CHECK(prefix_range_end("a\xff") == "b");
  CHECK(prefix_range_end(std::string("\xff\xff")) == std::string(1, '\0'));
  CHECK(prefix_range_end("") == std::string(1, '\0'));
}

TEST_CASE("etcd codec: int64 fields come as strings, numbers or not at all", "[etcd]") {
  const auto j = nlohmann::json::parse(R"({"a":"42","b":7,"c":"x","d":null})");
  CHECK(json_int(j, "a") == 42);
  CHECK(json_int(j, "b") == 7);
  CHECK(json_int(j, "missing") == 0);
  CHECK(json_int(j, "d") == 0);
  CHECK_THROWS_AS(json_int(j, "c"), ddp::ProtocolError);
}

TEST_CASE("etcd codec: endpoints", "[etcd]") {
  CHECK(parse_etcd_endpoint("127.0.0.1:2379").url() == "http://127.0.0.1:2379");
  CHECK(parse_etcd_endpoint("http://etcd-1:2379/").url() == "http://etcd-1:2379");
  CHECK(parse_etcd_endpoint("[::1]:2379").url() == "http://[::1]:2379");
  CHECK_THROWS_AS(parse_etcd_endpoint("etcd-1"), ddp::ConfigError);
  CHECK_THROWS_AS(parse_etcd_endpoint("etcd-1:0"), ddp::ConfigError);
  CHECK_THROWS_AS(parse_etcd_endpoint("etcd-1:2379/x"), ddp::ConfigError);
  CHECK(parse_etcd_endpoint("https://etcd-1:2379").url() == "https://etcd-1:2379");
  CHECK(parse_etcd_endpoint("etcd-1:2379", /*tls_default=*/true).url() == "https://etcd-1:2379");
  CHECK(parse_etcd_endpoint("http://etcd-1:2379", /*tls_default=*/true).url() ==
        "http://etcd-1:2379");
}
