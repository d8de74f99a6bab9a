// The job secret: loading a file only its owner can read, generating one, hex, the env.
#include "common/secret.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <thread>

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "tests/support/temp_dir.hpp"

using Catch::Matchers::Contains;
using ddp::ConfigError;
using ddp::test::TempDir;

namespace {

std::string write_secret(const TempDir& dir, const std::string& bytes, mode_t mode) {
  const std::string path = dir.write("job.secret", bytes);
  REQUIRE(::chmod(path.c_str(), mode) == 0);
  return path;
}

std::string refusal(const std::string& path) {
  try {
    ddp::load_secret_file(path);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("a 0600 secret file is read, its trailing newline dropped", "[secret]") {
  TempDir dir;
  CHECK(ddp::load_secret_file(write_secret(dir, "s3cret value\n", 0600)) == "s3cret value");
  CHECK(ddp::load_secret_file(write_secret(dir, "raw", 0400)) == "raw");
}

TEST_CASE("a secret file others can read is refused, naming the file and its mode", "[secret]") {
  TempDir dir;
  const mode_t mode = GENERATE(mode_t{0644}, mode_t{0640}, mode_t{0604}, mode_t{0660});
  const std::string path = write_secret(dir, "s3cret", mode);
  char octal[8];
  std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(mode));
  const std::string why = refusal(path);
  CHECK_THAT(why, Contains("secret file " + path + " has mode " + octal));
  CHECK_THAT(why, Contains("expected 0600 (chmod 600 " + path + ")"));
}

TEST_CASE("an empty, missing, symlinked or foreign secret file is refused", "[secret]") {
  TempDir dir;
  CHECK_THAT(refusal(write_secret(dir, "", 0600)), Contains("is empty"));
  CHECK_THAT(refusal(write_secret(dir, "\n\n", 0600)), Contains("is empty"));
  CHECK_THAT(refusal(dir.file("absent")),
             Contains("cannot open secret file " + dir.file("absent")));
  const std::string target = write_secret(dir, "s3cret", 0600);
  std::filesystem::create_symlink(target, dir.file("link"));
  CHECK_THAT(refusal(dir.file("link")), Contains("symbolic link"));
  CHECK_THAT(refusal(dir.path().string()), Contains("not a regular file"));
  if (::geteuid() == 0) {
    // Root can hand the file to somebody else: owned by another uid, it is refused.
    REQUIRE(::chown(target.c_str(), 65534, 65534) == 0);
    CHECK_THAT(refusal(target), Contains("is owned by uid 65534, not by this user"));
  }
}

TEST_CASE("a FIFO named as the secret file is refused at once, not waited on", "[secret]") {
  // Somebody who can create the name in a shared directory (/tmp) must not hang the launcher
  // in open() until a writer shows up.
  TempDir dir;
  const std::string fifo = dir.file("job.secret");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto result = std::make_shared<std::promise<std::string>>();
  auto answer = result->get_future();
  std::thread([result, fifo] { result->set_value(refusal(fifo)); }).detach();
  if (answer.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    // Unblock the thread (a writer lets its open() return) before failing.
    const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    answer.wait();
    if (w >= 0) ::close(w);
    FAIL("load_secret_file waited in open() on a FIFO for more than 5 s");
  }
  CHECK_THAT(answer.get(), Contains("not a regular file"));
}

TEST_CASE("generated secrets are 32 random bytes, hex round-trips", "[secret]") {
  const std::string a = ddp::generate_secret();
  const std::string b = ddp::generate_secret();
  CHECK(a.size() == ddp::kGeneratedSecretBytes);
  CHECK(a != b);
  CHECK(ddp::to_hex(std::string("\x00\xff\x10", 3)) == "00ff10");
  CHECK(ddp::from_hex(ddp::to_hex(a)) == a);
  CHECK(ddp::from_hex("0g") == std::nullopt);
  CHECK(ddp::from_hex("abc") == std::nullopt);
}

TEST_CASE("the environment names the secret: DDPLAUNCH_SECRET first, then the file", "[secret]") {
  TempDir dir;
  const std::string path = write_secret(dir, "from-file", 0600);
  std::map<std::string, std::string> env;
  auto get = [&](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  CHECK(ddp::secret_from_env(get) == std::nullopt);
  env[ddp::env::kSecretFile] = path;
  CHECK(ddp::secret_from_env(get) == "from-file");
  env[ddp::env::kSecret] = ddp::to_hex("from-hex");
  CHECK(ddp::secret_from_env(get) == "from-hex");
  env[ddp::env::kSecret] = "zz";
  CHECK_THROWS_AS(ddp::secret_from_env(get), ConfigError);
}
