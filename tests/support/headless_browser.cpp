#include "tests/support/headless_browser.hpp"

#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/core/detail/base64.hpp>
#include <boost/beast/websocket.hpp>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "tests/support/files.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/process.hpp"

namespace ddp::test {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;

struct HeadlessBrowser::Connection {
  asio::io_context io;
  websocket::stream<asio::ip::tcp::socket> socket{io};
};

namespace {

// DevToolsActivePort: the port on its first line (Chromium writes it once it listens).
uint16_t devtools_port(const std::filesystem::path& profile_dir, ChildProcess& process) {
  const auto path = profile_dir / "DevToolsActivePort";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    const auto text = read_file(path);
    if (text.find('\n') != std::string::npos) return static_cast<uint16_t>(std::stoi(text));
    if (process.wait_for(std::chrono::milliseconds(50))) {
      throw std::runtime_error("chromium exited before it listened: " + process.out() +
                               process.err());
    }
  }
  throw std::runtime_error("chromium wrote no " + path.string() + " within 60 s: " + process.out() +
                           process.err());
}

}  // namespace

std::optional<std::string> HeadlessBrowser::find() {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    for (const char* name : {"chromium", "chromium-browser"}) {
      const auto candidate = std::filesystem::path(dir) / name;
      if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    }
  }
  return std::nullopt;
}

HeadlessBrowser::HeadlessBrowser(const std::string& program,
                                 const std::filesystem::path& profile_dir, int width, int height) {
  std::filesystem::create_directories(profile_dir);
  ChildOptions options;
  options.argv = {
      program, "--headless=new",
      "--no-sandbox",  // tests run as root; the page is our own
      "--disable-gpu", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
      // A headless page counts as hidden: its timers would run once a minute or so.
      "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
      "--disable-backgrounding-occluded-windows", "--remote-debugging-address=127.0.0.1",
      "--remote-debugging-port=0", "--user-data-dir=" + profile_dir.string(),
      "--window-size=" + std::to_string(width) + "," + std::to_string(height), "about:blank"};
  options.own_process_group = true;
  process_ = std::make_unique<ChildProcess>(options);
  const uint16_t port = devtools_port(profile_dir, *process_);
  // The page target's WebSocket path, from the list of targets.
  std::string path;
  for (int attempt = 0; attempt < 100 && path.empty(); ++attempt) {
    const auto list = http_get(port, "/json/list");
    if (list.status == 200) {
      for (const auto& target : nlohmann::json::parse(list.body)) {
        if (target.value("type", "") != "page") continue;
        const std::string url = target.value("webSocketDebuggerUrl", "");
        const auto slash = url.find('/', url.find("//") + 2);
        if (slash != std::string::npos) path = url.substr(slash);
        break;
      }
    }
    if (path.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (path.empty())
    throw std::runtime_error("chromium has no page target on port " + std::to_string(port));
  connection_ = std::make_unique<Connection>();
  asio::ip::tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"), port);
  connection_->socket.next_layer().connect(endpoint);
  connection_->socket.handshake("127.0.0.1:" + std::to_string(port), path);
  connection_->socket.read_message_max(64 << 20);  // screenshots
}

HeadlessBrowser::~HeadlessBrowser() {
  if (connection_) {
    beast::error_code ignored;
    connection_->socket.next_layer().close(ignored);
  }
  // process_'s destructor kills Chromium's whole process group.
}

nlohmann::json HeadlessBrowser::call(const std::string& method, const nlohmann::json& params) {
  const int id = next_id_++;
  connection_->socket.write(
      asio::buffer(nlohmann::json{{"id", id}, {"method", method}, {"params", params}}.dump()));
  for (;;) {
    beast::flat_buffer buffer;
    connection_->socket.read(buffer);
    auto message = nlohmann::json::parse(beast::buffers_to_string(buffer.data()));
    if (message.value("id", 0) != id) continue;  // an event, or another call's reply
    if (message.contains("error")) {
      throw std::runtime_error(method + " failed: " + message["error"].dump());
    }
    return message.value("result", nlohmann::json::object());
  }
}

void HeadlessBrowser::navigate(const std::string& url, std::chrono::milliseconds timeout) {
  call("Page.navigate", {{"url", url}});
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (evaluate("document.readyState") != "complete") {
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error(url + " did not finish loading");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

nlohmann::json HeadlessBrowser::evaluate(const std::string& expression) {
  const auto result =
      call("Runtime.evaluate",
           {{"expression", expression}, {"returnByValue", true}, {"awaitPromise", true}});
  if (result.contains("exceptionDetails")) {
    throw std::runtime_error("'" + expression + "' threw: " + result["exceptionDetails"].dump());
  }
  const auto& value = result.value("result", nlohmann::json::object());
  return value.contains("value") ? value["value"] : nlohmann::json();
}

std::string HeadlessBrowser::screenshot_png() {
  const auto result =
      call("Page.captureScreenshot", {{"format", "png"}, {"captureBeyondViewport", true}});
  const std::string data = result.value("data", "");
  std::string png(beast::detail::base64::decoded_size(data.size()), '\0');
  const auto [written, read] = beast::detail::base64::decode(png.data(), data.data(), data.size());
  (void)read;
  png.resize(written);
  return png;
}

}  // namespace ddp::test
