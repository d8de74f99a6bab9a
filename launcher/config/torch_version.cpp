#include "launcher/config/torch_version.hpp"

#include <fstream>
#include <regex>
#include <sstream>

namespace ddp::launcher {
namespace fs = std::filesystem;

namespace {

bool present(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// "python3.11" when the interpreter's resolved file is python3.11 (a venv's python3 links to
// the base's python3, which links to python3.11); else every pythonX.Y under lib.
std::vector<std::string> python_dirs(const fs::path& interpreter, const fs::path& lib) {
  std::error_code ec;
  const std::string name = fs::canonical(interpreter, ec).filename().string();
  static const std::regex kVersioned(R"(python\d+\.\d+)");
  if (!ec && std::regex_match(name, kVersioned)) return {name};
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(lib, ec)) {
    const std::string dir = entry.path().filename().string();
    if (std::regex_match(dir, kVersioned)) found.push_back(dir);
  }
  return found;
}

// pyvenv.cfg's value for key ("home", "include-system-site-packages"); "" when absent.
std::string venv_setting(const fs::path& cfg, const std::string& key) {
  std::ifstream in(cfg);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    auto trim = [](const std::string& s) {
      const auto b = s.find_first_not_of(" \t\r");
      const auto e = s.find_last_not_of(" \t\r");
      return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
    };
    if (trim(line.substr(0, eq)) == key) return trim(line.substr(eq + 1));
  }
  return {};
}

// An installation's own directories: prefix/lib/pythonX.Y/site-packages, and Debian's.
void add_prefix(std::vector<fs::path>& out, const fs::path& interpreter, const fs::path& prefix,
                bool debian) {
  for (const auto& py : python_dirs(interpreter, prefix / "lib")) {
    if (debian) out.push_back(prefix / "local" / "lib" / py / "dist-packages");
    out.push_back(prefix / "lib" / py / "site-packages");
    if (debian) out.push_back(prefix / "lib" / py / "dist-packages");
  }
  if (debian) out.push_back(prefix / "lib" / "python3" / "dist-packages");
}

}  // namespace

std::vector<fs::path> python_search_path(const fs::path& interpreter, const Environment& env) {
  std::vector<fs::path> out;
  std::stringstream pythonpath(env_value(env, "PYTHONPATH"));
  for (std::string entry; std::getline(pythonpath, entry, ':');) {
    if (!entry.empty()) out.emplace_back(entry);
  }
  const fs::path prefix = interpreter.parent_path().parent_path();  // .../bin/python3 -> ...
  const fs::path cfg = prefix / "pyvenv.cfg";
  if (present(cfg)) {
    for (const auto& py : python_dirs(interpreter, prefix / "lib")) {
      out.push_back(prefix / "lib" / py / "site-packages");
    }
    if (venv_setting(cfg, "include-system-site-packages") == "true") {
      const fs::path home = venv_setting(cfg, "home");  // the base interpreter's bin/
      if (!home.empty()) add_prefix(out, interpreter, home.parent_path(), true);
    }
    return out;
  }
  const std::string home = env_value(env, "HOME");
  if (!home.empty()) {
    for (const auto& py : python_dirs(interpreter, fs::path(home) / ".local" / "lib")) {
      out.push_back(fs::path(home) / ".local" / "lib" / py / "site-packages");
    }
  }
  add_prefix(out, interpreter, prefix, true);
  return out;
}

std::optional<int> parse_torch_major(const std::string& version_py) {
  static const std::regex kLine(R"(^__version__\s*=\s*['"](\d+)\.)", std::regex::multiline);
  std::smatch m;
  if (!std::regex_search(version_py, m, kLine)) return std::nullopt;
  try {
    return std::stoi(m[1].str());
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<int> worker_torch_major(const fs::path& interpreter, const Environment& env) {
  for (const auto& dir : python_search_path(interpreter, env)) {
    const fs::path version = dir / "torch" / "version.py";
    if (!present(version)) continue;
    std::ifstream in(version);
    std::stringstream text;
    text << in.rdbuf();
    return parse_torch_major(text.str());  // the first torch found is the one imported
  }
  return std::nullopt;
}

}  // namespace ddp::launcher
