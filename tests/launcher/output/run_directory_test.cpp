// Run directories: torchrun's <run_id>_<random> under --log_dir, and temporary ones locked by
// their agent, removed at exit (kept after a failure) or by the next agent once it is gone.
#include "launcher/output/run_directory.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "tests/support/temp_dir.hpp"

using namespace ddp::launcher;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using ddp::test::TempDir;

TEST_CASE("with --log_dir every run gets its own <run_id>_<random> directory", "[run_dir]") {
  TempDir dir;
  LaunchConfig config;
  config.log_dir = (dir.path() / "logs").string();
  RunDirectory first(config, "none", {});
  RunDirectory second(config, "none", {});
  CHECK_FALSE(first.temporary());
  CHECK(first.path() != second.path());
  CHECK(first.path().parent_path() == dir.path() / "logs");
  CHECK_THAT(first.path().filename().string(), StartsWith("none_"));
  CHECK(std::filesystem::is_directory(second.path()));
  CHECK(first.finish(1).empty());  // never removed, nothing to say
}

TEST_CASE("a temporary run directory is removed at exit unless a failed job left files",
          "[run_dir]") {
  TempDir tmp;
  Environment env = {{"TMPDIR", tmp.path().string()}};
  std::filesystem::path kept;
  std::filesystem::path removed;
  {
    RunDirectory ok(LaunchConfig{}, "none", env);
    CHECK(ok.temporary());
    CHECK_THAT(ok.path().filename().string(), StartsWith("ddplaunch_"));
    CHECK(std::filesystem::exists(ok.path() / ".owner"));
    std::filesystem::create_directories(ok.path() / "attempt_0" / "0");
    std::ofstream(ok.path() / "attempt_0" / "0" / "error.json") << "{}";
    CHECK(ok.finish(0).empty());
    removed = ok.path();

    RunDirectory failed(LaunchConfig{}, "none", env);
    std::filesystem::create_directories(failed.path() / "attempt_0" / "1");
    std::ofstream(failed.path() / "attempt_0" / "1" / "error.json") << "{}";
    CHECK_THAT(failed.finish(7), Contains("kept in " + failed.path().string()));
    kept = failed.path();

    RunDirectory empty(LaunchConfig{}, "none", env);
    CHECK(empty.finish(7).empty());  // a failure with no files: nothing worth keeping
  }
  CHECK_FALSE(std::filesystem::exists(removed));
  CHECK(std::filesystem::exists(kept / "attempt_0" / "1" / "error.json"));
  CHECK_FALSE(std::filesystem::exists(kept / ".owner"));  // no later agent takes it for stale
  CHECK(remove_stale_run_directories(tmp.path()) == 0);
  CHECK(std::filesystem::exists(kept));
}

TEST_CASE("stale run directories are those whose owner lock is free", "[run_dir]") {
  TempDir tmp;
  auto make = [&](const std::string& name, bool owner) {
    std::filesystem::create_directories(tmp.path() / name / "attempt_0");
    if (owner) std::ofstream(tmp.path() / name / ".owner") << "pid 1\n";
    return tmp.path() / name;
  };
  auto live = make("ddplaunch_live", true);
  auto dead = make("ddplaunch_dead", true);
  auto no_owner = make("ddplaunch_kept", false);
  auto other = make("something_else", true);
  // A live agent holds the lock (a second open file description conflicts, even here).
  int held = ::open((live / ".owner").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(::flock(held, LOCK_EX | LOCK_NB) == 0);

  CHECK(remove_stale_run_directories(tmp.path()) == 1);
  CHECK(std::filesystem::exists(live));
  CHECK_FALSE(std::filesystem::exists(dead));
  CHECK(std::filesystem::exists(no_owner));
  CHECK(std::filesystem::exists(other));
  ::close(held);  // the agent is gone
  CHECK(remove_stale_run_directories(tmp.path()) == 1);
  CHECK_FALSE(std::filesystem::exists(live));
  CHECK(remove_stale_run_directories(tmp.path() / "missing") == 0);
}
