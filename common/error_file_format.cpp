#include "common/error_file_format.hpp"

#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>

namespace ddp::error_file {

std::string to_json(const std::string& message, const std::string& callstack, long long timestamp) {
  nlohmann::json doc = {
      {"message",
       {{"message", message},
        {"extraInfo", {{"py_callstack", callstack}, {"timestamp", std::to_string(timestamp)}}}}}};
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool write(const std::string& path, const std::string& message, const std::string& callstack) {
  try {
    std::ofstream out(path, std::ios::trunc);
    out << to_json(message, callstack, static_cast<long long>(std::time(nullptr))) << '\n';
    out.close();
    return static_cast<bool>(out);
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace ddp::error_file
