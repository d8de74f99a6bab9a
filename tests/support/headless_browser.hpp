#pragma once
// A real browser for tests of the pages ddplaunch serves: headless Chromium (Debian's
// `chromium`, scripts/setup.sh) driven over its DevTools protocol (a WebSocket on loopback),
// so a test loads a page once and watches its script update it: navigate, evaluate an
// expression in the page, take a screenshot. Chromium is killed with the object.
#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace ddp::test {

class ChildProcess;

class HeadlessBrowser {
 public:
  // The chromium program on PATH (chromium, chromium-browser), nullopt when there is none.
  static std::optional<std::string> find();

  // Starts Chromium with a profile in profile_dir and a viewport of width x height; throws
  // std::runtime_error naming what failed (no DevTools port within 60 s, no page target).
  HeadlessBrowser(const std::string& program, const std::filesystem::path& profile_dir,
                  int width = 1280, int height = 900);
  ~HeadlessBrowser();
  HeadlessBrowser(const HeadlessBrowser&) = delete;
  HeadlessBrowser& operator=(const HeadlessBrowser&) = delete;

  // Loads url and waits (up to timeout) until the document is complete.
  void navigate(const std::string& url,
                std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // The value of a JavaScript expression evaluated in the page (JSON; null for undefined).
  // Throws std::runtime_error with the page's exception text when it throws.
  nlohmann::json evaluate(const std::string& expression);
  // The page as a PNG, the whole of it (not just the viewport).
  std::string screenshot_png();

 private:
  // Sends one DevTools command and returns its result (events in between are skipped).
  nlohmann::json call(const std::string& method, const nlohmann::json& params);

  struct Connection;
  std::unique_ptr<ChildProcess> process_;
  std::unique_ptr<Connection> connection_;
  int next_id_ = 1;
};

}  // namespace ddp::test
