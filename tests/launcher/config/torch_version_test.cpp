// Finding the PyTorch a Python worker will import from its files, on fake installations
// laid out as a venv, Debian's python3 and pip --user lay them out.
#include "launcher/config/torch_version.hpp"

#include <catch2/catch.hpp>
#include <fstream>

#include "tests/support/temp_dir.hpp"

using namespace ddp::launcher;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

void torch_at(const fs::path& dir, const std::string& version) {
  write(dir / "torch" / "version.py",
        "from typing import Optional\n\n__version__ = '" + version + "'\ndebug = False\n");
}

// base/bin/python3 -> python3.11, as Debian installs it.
fs::path base_python(const fs::path& base) {
  write(base / "bin" / "python3.11", "");
  fs::create_symlink("python3.11", base / "bin" / "python3");
  return base / "bin" / "python3";
}

// venv/bin/python3 -> base's python3, with pyvenv.cfg; returns venv/bin/python3.
fs::path make_venv(const fs::path& venv, const fs::path& base, bool system_site) {
  fs::create_directories(venv / "bin");
  fs::create_symlink(base_python(base), venv / "bin" / "python3");
  write(venv / "pyvenv.cfg", "home = " + (base / "bin").string() +
                                 "\ninclude-system-site-packages = " +
                                 (system_site ? "true" : "false") + "\nversion = 3.11.2\n");
  return venv / "bin" / "python3";
}

}  // namespace

TEST_CASE("torch's major version is read from version.py's __version__ line", "[env][torch]") {
  CHECK(parse_torch_major("__version__ = '2.15.0+cu132'\n") == 2);
  CHECK(parse_torch_major("x = 1\n__version__ = '1.13.0a0'\ndebug = False\n") == 1);
  CHECK(parse_torch_major("__version__ = \"2.5.1\"\n") == 2);
  CHECK_FALSE(parse_torch_major("version = '2.5.1'\n").has_value());
  CHECK_FALSE(parse_torch_major("# __version__ = '2.5.1'\n").has_value());
  CHECK_FALSE(parse_torch_major("").has_value());
}

TEST_CASE("a venv's torch is found through its python3 link", "[env][torch]") {
  ddp::test::TempDir dir;
  torch_at(dir.path() / "base" / "lib" / "python3" / "dist-packages", "1.13.0a0");
  const auto python = make_venv(dir.path() / "venv", dir.path() / "base", false);
  CHECK_FALSE(worker_torch_major(python, {}).has_value());  // the base's is not visible
  torch_at(dir.path() / "venv" / "lib" / "python3.11" / "site-packages", "2.15.0+cu132");
  CHECK(worker_torch_major(python, {}) == 2);
  // PYTHONPATH comes first, as in Python.
  torch_at(dir.path() / "pp", "1.13.1");
  CHECK(worker_torch_major(python, {{"PYTHONPATH", "/nonexistent:" + dir.file("pp")}}) == 1);
}

TEST_CASE("a venv with system site packages falls back to the base's torch", "[env][torch]") {
  ddp::test::TempDir dir;
  torch_at(dir.path() / "base" / "lib" / "python3" / "dist-packages", "1.13.0a0");
  const auto python = make_venv(dir.path() / "venv", dir.path() / "base", true);
  CHECK(worker_torch_major(python, {}) == 1);
  torch_at(dir.path() / "venv" / "lib" / "python3.11" / "site-packages", "2.5.1");
  CHECK(worker_torch_major(python, {}) == 2);  // the venv's own first
}

TEST_CASE("a system python: the user site, then /usr/local, then Debian's", "[env][torch]") {
  ddp::test::TempDir dir;
  const auto python = base_python(dir.path() / "usr");
  const ddp::Environment env = {{"HOME", dir.file("home")}};
  CHECK_FALSE(worker_torch_major(python, env).has_value());
  torch_at(dir.path() / "usr" / "lib" / "python3" / "dist-packages", "1.13.0a0");
  CHECK(worker_torch_major(python, env) == 1);
  torch_at(dir.path() / "usr" / "local" / "lib" / "python3.11" / "dist-packages", "2.11.0");
  CHECK(worker_torch_major(python, env) == 2);
  torch_at(dir.path() / "home" / ".local" / "lib" / "python3.11" / "site-packages", "1.13.1");
  CHECK(worker_torch_major(python, env) == 1);
  // Another Python version's directories are not this interpreter's.
  torch_at(dir.path() / "home" / ".local" / "lib" / "python3.12" / "site-packages", "2.11.0");
  CHECK(worker_torch_major(python, env) == 1);
}

TEST_CASE("this machine's Debian python3 finds Debian's PyTorch 1.13", "[env][torch]") {
  // The real layout, when present (docs/testing.md: python3-torch is installed by setup).
  if (!fs::exists("/usr/lib/python3/dist-packages/torch/version.py")) {
    WARN("skipped: no Debian python3-torch");
    return;
  }
  CHECK(worker_torch_major("/usr/bin/python3", {}) == 1);
}
