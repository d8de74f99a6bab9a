// Flags: defaults, parsing, and clear errors for bad values.
#include "trainer/cli.hpp"

#include <catch2/catch.hpp>
#include <iostream>
#include <sstream>

#include "common/error.hpp"
#include "common/version.hpp"

using namespace ddp::trainer;
using Catch::Matchers::Contains;

namespace {

std::optional<TrainOptions> parse(std::initializer_list<const char*> flags) {
  std::vector<const char*> args{"train"};
  args.insert(args.end(), flags.begin(), flags.end());
  return parse_command_line(static_cast<int>(args.size()), args.data());
}

// Collects what std::cout receives while it lives.
class CoutCapture {
 public:
  CoutCapture() : old_(std::cout.rdbuf(text_.rdbuf())) {}
  ~CoutCapture() { std::cout.rdbuf(old_); }
  CoutCapture(const CoutCapture&) = delete;
  CoutCapture& operator=(const CoutCapture&) = delete;
  [[nodiscard]] std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
  std::streambuf* old_;
};

}  // namespace

TEST_CASE("flags fill the options", "[cli]") {
  const auto o = parse({"--data", "x.csv.gz", "--hidden", "32,16", "--batch_size", "8",
                        "--optimizer", "sgd", "--lr", "0.05", "--epochs", "3"});
  REQUIRE(o);
  CHECK(o->data == "x.csv.gz");
  CHECK(o->hidden == std::vector<std::size_t>{32, 16});
  CHECK(o->batch_size == 8);
  CHECK(o->optimizer.name == "sgd");
  CHECK(o->epochs == 3);
}

TEST_CASE("bad flags name the flag and the value", "[cli]") {
  CHECK_THROWS_WITH(parse({"--batch_size", "0"}), Contains("--batch_size 0"));
  CHECK_THROWS_WITH(parse({"--batch_size", "many"}), Contains("--batch_size") && Contains("many"));
  CHECK_THROWS_WITH(parse({"--val_fraction", "1.5"}), Contains("--val_fraction"));
  CHECK_THROWS_WITH(parse({"--backend", "mpi"}), Contains("'mpi'"));
  CHECK_THROWS_WITH(parse({"--lr", "-1"}), Contains("--lr"));
  CHECK_THROWS_WITH(parse({"--no_such_flag"}), Contains("--no_such_flag"));
  CHECK_THROWS_AS(parse({"--epochs", "0"}), ddp::ConfigError);
  CHECK_THROWS_WITH(parse({"--fault_kill_node_at_step", "-2"}),
                    Contains("--fault_kill_node_at_step -2"));
}

TEST_CASE("in-place recovery test hooks", "[cli]") {
  const auto o = parse({"--sample_log", "/tmp/s", "--fault_kill_node_at_step", "7"});
  REQUIRE(o);
  CHECK(o->sample_log == "/tmp/s");
  CHECK(o->fault_kill_node_at_step == 7);
  const auto defaults = parse({});
  REQUIRE(defaults);
  CHECK(defaults->sample_log.empty());
  CHECK(defaults->fault_kill_node_at_step == 0);
}

TEST_CASE("help (--help) prints and asks the caller to exit", "[cli]") {
  CHECK_FALSE(parse({"--help"}));
}

TEST_CASE("version (--version) prints the version and asks the caller to exit", "[cli]") {
  CoutCapture out;
  CHECK_FALSE(parse({"--version"}));
  CHECK(out.text() == std::string("train (ddplaunch) ") + ddp::kVersion + "\n");
}
