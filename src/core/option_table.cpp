#include "core/option_table.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>

#include "core/log.hpp"

extern char** environ;

namespace rdmakit::options {

bool parse_value(std::string_view text, std::string& out) {
  out = std::string(text);
  return true;
}
bool parse_value(std::string_view text, bool& out) {
  if (text == "1" || text == "yes" || text == "on" || text == "true") return out = true, true;
  if (text == "0" || text == "no" || text == "off" || text == "false") return out = false, true;
  return false;
}
bool parse_value(std::string_view text, WaitMode& out) {
  if (text == "spin") return out = WaitMode::Spin, true;
  if (text == "block") return out = WaitMode::Block, true;
  if (text == "hybrid") return out = WaitMode::Hybrid, true;
  return false;
}
std::string print_value(WaitMode mode) {
  return mode == WaitMode::Spin ? "spin" : mode == WaitMode::Block ? "block" : "hybrid";
}

std::string env_name(std::string_view name) {
  std::string env = "RDMAKIT_";
  for (char c : name) env += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return env;
}

Error bad_option(std::string_view name, std::string_view why) {
  return Error(Errc::InvalidArgument,
               "option " + std::string(name) + " (" + env_name(name) + "): " + std::string(why));
}

bool Table::declares(std::string_view name) const {
  for (const OptionInfo& info : declared())
    if (info.name == name) return true;
  return false;
}

std::optional<std::string> read_option_env(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  return value ? std::optional<std::string>(value) : std::nullopt;
}

// Variables the test suites and the Soft-RoCE VM harness set for themselves; no library option starts so.
std::span<const std::string_view> reserved_prefixes() noexcept {
  static constexpr std::string_view prefixes[] = {"RDMAKIT_TEST_", "RDMAKIT_CONFORMANCE_", "RDMAKIT_VM_",
                                                  "RDMAKIT_SOFTROCE_"};
  return prefixes;
}

namespace {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<std::string> declared_variables() {
  std::vector<std::string> names;
  for (const Table* table : option_tables())
    for (const OptionInfo& info : table->declared()) names.push_back(info.env);
  return names;
}

bool is_declared_or_reserved(std::string_view name, const std::vector<std::string>& declared) {
  for (std::string_view prefix : reserved_prefixes())
    if (name.starts_with(prefix)) return true;
  return std::find(declared.begin(), declared.end(), name) != declared.end();
}

}  // namespace

std::string closest_option(std::string_view name) { return closest_of(name, declared_variables()); }

std::string closest_of(std::string_view name, std::span<const std::string> candidates) {
  std::string best;
  std::size_t best_distance = 0;
  for (const std::string& candidate : candidates) {
    std::size_t distance = edit_distance(name, candidate);
    if (best.empty() || distance < best_distance) best = candidate, best_distance = distance;
  }
  // Closer than a third of the name's own part (after RDMAKIT_): a typo, not another word.
  std::size_t own = name.starts_with("RDMAKIT_") ? name.size() - 8 : name.size();
  return best_distance <= std::max<std::size_t>(2, own / 3) ? best : std::string();
}

std::vector<std::string> unknown_environment() {
  std::vector<std::string> messages;
  std::vector<std::string> declared = declared_variables();
  for (char** entry = environ; entry && *entry; ++entry) {
    std::string_view variable(*entry);
    std::string_view name = variable.substr(0, variable.find('='));
    if (!name.starts_with("RDMAKIT_") || is_declared_or_reserved(name, declared)) continue;
    std::string closest = closest_option(name);
    messages.push_back(log::printable(name) + " is set but is no rdmakit option" +
                       (closest.empty() ? std::string(" (rdmakit-info --config lists them)")
                                        : "; did you mean " + closest + "?"));
  }
  return messages;
}

void warn_unknown_environment() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const std::string& message : unknown_environment()) log::warn("options", message);
  });
}

}  // namespace rdmakit::options
