// The health endpoint's options: --health_port in both spellings, PET_HEALTH_PORT, torchrun's
// TORCHELASTIC_HEALTH_CHECK_PORT, --health_bind, and bad values named.
#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "launcher/config/cli.hpp"

using namespace ddp::launcher;
using Catch::Matchers::Contains;

namespace {

const Environment kEnv = {{"PATH", "/usr/bin:/bin"}, {"CUDA_VISIBLE_DEVICES", ""}};

LaunchConfig parse(std::vector<std::string> args, Environment env = kEnv) {
  auto command_line = parse_command_line(args, env);
  REQUIRE(command_line.config.has_value());
  return *command_line.config;
}

std::string error_of(std::vector<std::string> args, Environment env = kEnv) {
  try {
    parse_command_line(args, env);
  } catch (const ddp::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

Environment with(const std::string& name, const std::string& value) {
  auto env = kEnv;
  env[name] = value;
  return env;
}

}  // namespace

TEST_CASE("health endpoint: off by default, on loopback when a port is given", "[cli][health]") {
  auto plain = parse({"/bin/true"});
  CHECK_FALSE(plain.health_port.has_value());
  CHECK(plain.health_bind == "127.0.0.1");
  CHECK(parse({"--health_port=9100", "/bin/true"}).health_port == 9100);
  CHECK(parse({"--health-port", "0", "/bin/true"}).health_port == 0);
  CHECK(parse({"--health-bind", "::", "/bin/true"}).health_bind == "::");
  CHECK(parse({"/bin/true"}, with("PET_HEALTH_PORT", "9101")).health_port == 9101);
  CHECK(parse({"/bin/true"}, with("PET_HEALTH_BIND", "0.0.0.0")).health_bind == "0.0.0.0");
}

TEST_CASE("health endpoint: torchrun's TORCHELASTIC_HEALTH_CHECK_PORT, below the flag",
          "[cli][health]") {
  const auto env = with("TORCHELASTIC_HEALTH_CHECK_PORT", "9102");
  CHECK(parse({"/bin/true"}, env).health_port == 9102);
  CHECK(parse({"--health_port=9103", "/bin/true"}, env).health_port == 9103);
  auto both = env;
  both["PET_HEALTH_PORT"] = "9104";
  CHECK(parse({"/bin/true"}, both).health_port == 9104);
  // Set but empty: as unset.
  CHECK_FALSE(parse({"/bin/true"}, with("TORCHELASTIC_HEALTH_CHECK_PORT", "")).health_port);
}

TEST_CASE("health endpoint: a port out of range or not a number is named", "[cli][health]") {
  CHECK_THAT(error_of({"--health_port=70000", "/bin/true"}), Contains("--health_port"));
  CHECK_THAT(error_of({"--health_port=70000", "/bin/true"}), Contains("70000"));
  CHECK_THAT(error_of({"--health_port=http", "/bin/true"}), Contains("http"));
  CHECK_THAT(error_of({"/bin/true"}, with("PET_HEALTH_PORT", "-1")),
             Contains("PET_HEALTH_PORT=-1"));
  CHECK(error_of({"/bin/true"}, with("TORCHELASTIC_HEALTH_CHECK_PORT", "port")) ==
        "TORCHELASTIC_HEALTH_CHECK_PORT='port': expected an integer in [0, 65535]");
}
