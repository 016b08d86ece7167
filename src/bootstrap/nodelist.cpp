// Slurm's compressed host lists: "node[01-04,07],login1" -> node01 node02 node03 node04 node07 login1.
// Brackets may appear more than once in a name ("r[1-2]-n[1-2]"); numbers keep their zero padding.
#include <charconv>

#include "rdmakit/bootstrap.hpp"

namespace rdmakit::bootstrap {
namespace {

// Splits at commas that are not inside brackets.
Result<std::vector<std::string_view>> split_top_level(std::string_view list) {
  std::vector<std::string_view> parts;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (list[i] == '[') ++depth;
    if (list[i] == ']' && --depth < 0) return fail(Errc::InvalidArgument, "host list: unbalanced ']'");
    if (list[i] == ',' && depth == 0) {
      parts.push_back(list.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) return fail(Errc::InvalidArgument, "host list: unbalanced '['");
  parts.push_back(list.substr(start));
  return parts;
}

bool parse_number(std::string_view text, long& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

std::string padded(long value, std::size_t width) {
  std::string digits = std::to_string(value);
  return std::string(digits.size() < width ? width - digits.size() : 0, '0') + digits;
}

// "01-04,07" -> 01 02 03 04 07
Result<std::vector<std::string>> expand_range(std::string_view ranges) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= ranges.size()) {
    std::size_t comma = ranges.find(',', start);
    std::string_view item = ranges.substr(start, comma == std::string_view::npos ? comma : comma - start);
    std::size_t dash = item.find('-');
    long low = 0, high = 0;
    std::string_view first = item.substr(0, dash);
    if (!parse_number(first, low) ||
        (dash != std::string_view::npos && !parse_number(item.substr(dash + 1), high)))
      return fail(Errc::InvalidArgument, "host list: bad range '" + std::string(item) + "'");
    if (dash == std::string_view::npos) high = low;
    if (high < low || high - low > 100000)
      return fail(Errc::InvalidArgument, "host list: bad range '" + std::string(item) + "'");
    for (long v = low; v <= high; ++v) out.push_back(padded(v, first.size()));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

// One name with any number of bracket groups, expanded left to right.
Result<std::vector<std::string>> expand_name(std::string_view name) {
  std::size_t open = name.find('[');
  if (open == std::string_view::npos) return std::vector<std::string>{std::string(name)};
  std::size_t close = name.find(']', open);
  if (close == std::string_view::npos) return fail(Errc::InvalidArgument, "host list: unbalanced '['");
  auto middles = expand_range(name.substr(open + 1, close - open - 1));
  if (!middles) return std::unexpected(middles.error());
  auto tails = expand_name(name.substr(close + 1));
  if (!tails) return std::unexpected(tails.error());
  std::vector<std::string> out;
  for (const auto& middle : *middles)
    for (const auto& tail : *tails) out.push_back(std::string(name.substr(0, open)) + middle + tail);
  return out;
}

}  // namespace

Result<std::vector<std::string>> expand_nodelist(std::string_view list) {
  auto parts = split_top_level(list);
  if (!parts) return std::unexpected(parts.error());
  std::vector<std::string> hosts;
  for (std::string_view part : *parts) {
    if (part.empty())
      return fail(Errc::InvalidArgument, "host list: empty name in '" + std::string(list) + "'");
    auto names = expand_name(part);
    if (!names) return std::unexpected(names.error());
    hosts.insert(hosts.end(), names->begin(), names->end());
  }
  return hosts;
}

}  // namespace rdmakit::bootstrap
