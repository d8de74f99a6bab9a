#include "launcher/binding/cpu_list.hpp"

#include <algorithm>
#include <iterator>

#include "common/parse_int.hpp"

namespace ddp::launcher {

std::optional<std::vector<int>> parse_cpu_list(std::string_view text, int max_id) {
  std::vector<int> ids;
  if (text.empty()) return std::nullopt;
  size_t start = 0;
  while (start <= text.size()) {
    auto comma = text.find(',', start);
    auto item = text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    auto dash = item.find('-');
    auto first = try_parse_int(item.substr(0, dash), 0, max_id);
    auto last =
        dash == std::string_view::npos ? first : try_parse_int(item.substr(dash + 1), 0, max_id);
    if (!first || !last || *first > *last) return std::nullopt;
    for (auto id = *first; id <= *last; ++id) ids.push_back(static_cast<int>(id));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::string format_cpu_list(std::vector<int> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::string text;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!text.empty()) text += ',';
    text += std::to_string(ids[i]);
    if (j > i) text += '-' + std::to_string(ids[j]);
    i = j + 1;
  }
  return text;
}

std::vector<int> intersect_ids(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> both;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  return both;
}

}  // namespace ddp::launcher
