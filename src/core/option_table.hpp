// One options system for every layer. A layer (core, bootstrap, coll, ...) declares an OptionTable over
// its resolved config type and the struct of std::optional fields its callers set in code; resolving it
// takes, per option, the value set in code, else RDMAKIT_<NAME> from the environment, else the default.
// A value that does not parse is an error naming the option and its variable. The tables of the library
// are listed in src/library/builtin.cpp (option_tables()), so describe_options() and `rdmakit-info
// --config` show every option, and a misspelt RDMAKIT_* variable draws a warning naming the closest one.
// A transport's table (src/transport/<name>/options.cpp) has no typed fields in Options: its options are
// set by name (Options::set) or the environment, carried as text in Config::transport_options, and
// resolved into the transport's own struct when it opens (Sources{named, environment = false}).
#pragma once

#include <charconv>
#include <chrono>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "rdmakit/options.hpp"

namespace rdmakit::options {

// ---- Parsing and printing of each value type ----------------------------------------------------
template <typename Int>
  requires std::is_integral_v<Int>
bool parse_value(std::string_view text, Int& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}
bool parse_value(std::string_view text, std::string& out);
bool parse_value(std::string_view text, bool& out);
bool parse_value(std::string_view text, WaitMode& out);
template <typename Rep, typename Period>
bool parse_value(std::string_view text, std::chrono::duration<Rep, Period>& out) {
  Rep count{};
  if (!parse_value(text, count) || count < 0) return false;
  out = std::chrono::duration<Rep, Period>(count);
  return true;
}
template <typename T>
bool parse_value(std::string_view text, std::optional<T>& out) {
  T value{};
  if (!parse_value(text, value)) return false;
  out = std::move(value);
  return true;
}

template <typename Int>
  requires std::is_integral_v<Int>
std::string print_value(Int value) {
  return std::to_string(value);
}
inline std::string print_value(bool value) { return value ? "yes" : "no"; }
inline std::string print_value(const std::string& value) { return value; }
std::string print_value(WaitMode mode);
template <typename Rep, typename Period>
std::string print_value(std::chrono::duration<Rep, Period> value) {
  return std::to_string(value.count());
}
template <typename T>
std::string print_value(const std::optional<T>& value) {
  return value ? print_value(*value) : std::string();
}

// RDMAKIT_<NAME>, upper case.
std::string env_name(std::string_view name);
// The one place the library reads RDMAKIT_* option variables.
std::optional<std::string> read_option_env(const std::string& name);
// "option <name> (RDMAKIT_<NAME>): <why>", Errc::InvalidArgument.
Error bad_option(std::string_view name, std::string_view why);

// ---- One table ----------------------------------------------------------------------------------
// What the layer-independent code needs of a table: its options, and their effective values.
class Table {
 public:
  virtual ~Table() = default;
  virtual std::string_view layer() const noexcept = 0;
  // Every option with its default (value = default): names for listings and the misspelling check.
  virtual std::vector<OptionInfo> declared() const = 0;
  // Every option with its effective value given the environment and nothing set in code.
  virtual Result<std::vector<OptionInfo>> effective() const = 0;
  bool declares(std::string_view name) const;

  // For options set by name (a transport's, carried in Config::transport_options):
  // the texts of this table's options named in `named` or set in the environment (named wins), unparsed;
  virtual NamedOptions set_texts(const NamedOptions& named) const = 0;
  // whether `named` (and defaults, no environment) resolves: an error names the option;
  virtual Result<void> check_named(const NamedOptions& named) const = 0;
  // every option with its value in `named`, else its default.
  virtual std::vector<OptionInfo> describe_named(const NamedOptions& named) const = 0;
};

// Where resolve() takes values from, after the typed fields set in code: texts by name (Options::set),
// then the environment unless `environment` is false (a transport resolving what Config carries).
struct Sources {
  const NamedOptions* named = nullptr;
  bool environment = true;
};

template <typename Config, typename Given>
struct Spec {
  const char* name;
  const char* default_value;  // nullptr: none (the field is a std::optional left empty)
  const char* doc;
  const char* expected;  // what a valid value looks like, for error messages
  std::function<bool(Config&, std::string_view)> parse;
  std::function<bool(Config&, const Given&)> from_code;  // true when set in code
  std::function<std::string(const Config&)> print;
};

// An option whose resolved value is `field`, set in code through `given` (nullptr: by name or environment
// only).
template <typename Config, typename Given, typename Field, typename Value>
Spec<Config, Given> option(const char* name, const char* default_value, const char* doc, const char* expected,
                           Field Config::*field, std::optional<Value> Given::*given) {
  return Spec<Config, Given>{
      name,
      default_value,
      doc,
      expected,
      [field](Config& c, std::string_view text) { return parse_value(text, c.*field); },
      [given, field](Config& c, const Given& g) {
        if (given == nullptr || !(g.*given)) return false;
        c.*field = *(g.*given);
        return true;
      },
      [field](const Config& c) { return print_value(c.*field); }};
}

// What a table set only by name takes from code (a transport's table): nothing typed.
struct NoGiven {};

// An option of a table set only by name (Options::set) or the environment: a transport's.
template <typename Config, typename Field>
Spec<Config, NoGiven> option(const char* name, const char* default_value, const char* doc,
                             const char* expected, Field Config::*field) {
  return Spec<Config, NoGiven>{
      name,
      default_value,
      doc,
      expected,
      [field](Config& c, std::string_view text) { return parse_value(text, c.*field); },
      [](Config&, const NoGiven&) { return false; },
      [field](const Config& c) { return print_value(c.*field); }};
}

// Warns once per process about each RDMAKIT_* environment variable that no table declares (a typo such
// as RDMAKIT_TIMOUT_MS), naming the closest option. Variables of the test and VM harness are reserved
// (reserved_prefixes()). Every table's resolve() calls it.
void warn_unknown_environment();
// The warnings warn_unknown_environment() gives, for the environment as it is now.
std::vector<std::string> unknown_environment();
std::span<const std::string_view> reserved_prefixes() noexcept;
// The closest declared variable to `name` (edit distance), or empty when none is close.
std::string closest_option(std::string_view name);
// The closest of `candidates` to `name` by the same rule, or empty.
std::string closest_of(std::string_view name, std::span<const std::string> candidates);

// Which options were set (in code or in the environment) rather than left at their default.
class SetOptions {
 public:
  void add(std::string_view name) { names_.push_back(name); }
  bool contains(std::string_view name) const {
    for (std::string_view n : names_)
      if (n == name) return true;
    return false;
  }

 private:
  std::vector<std::string_view> names_;
};

template <typename Config, typename Given>
class OptionTable final : public Table {
 public:
  // Derived defaults and checks of combinations, after parsing.
  using Check = std::function<Result<void>(Config&, const SetOptions&)>;
  OptionTable(const char* layer, std::vector<Spec<Config, Given>> specs, Check check = {})
      : layer_(layer), specs_(std::move(specs)), check_(std::move(check)) {}

  // `set_out`, when given, receives which options were set in code or in the environment.
  Result<Config> resolve(const Given& given, SetOptions* set_out = nullptr, Sources sources = {}) const {
    if (sources.environment) warn_unknown_environment();
    Config config{};
    SetOptions set;
    for (const auto& spec : specs_) {
      if (spec.default_value && !spec.parse(config, spec.default_value))
        return fail(Errc::InvalidArgument, std::string("bad built-in default for option ") + spec.name);
      if (spec.from_code(config, given)) {
        set.add(spec.name);
        continue;
      }
      auto text = text_of(spec.name, sources);
      if (!text) continue;
      if (!spec.parse(config, *text))
        return std::unexpected(
            bad_option(spec.name, "'" + *text + "' is not valid; expected " + std::string(spec.expected)));
      set.add(spec.name);
    }
    if (check_)
      if (auto ok = check_(config, set); !ok) return std::unexpected(ok.error());
    if (set_out) *set_out = std::move(set);
    return config;
  }

  std::vector<OptionInfo> describe(const Config& config) const {
    std::vector<OptionInfo> infos;
    for (const auto& spec : specs_)
      infos.push_back(OptionInfo{spec.name, env_name(spec.name), spec.print(config),
                                 spec.default_value ? spec.default_value : "", spec.doc, layer_});
    return infos;
  }

  std::string_view layer() const noexcept override { return layer_; }
  std::vector<OptionInfo> declared() const override {
    std::vector<OptionInfo> infos;
    for (const auto& spec : specs_) {
      std::string value = spec.default_value ? spec.default_value : "";
      infos.push_back(OptionInfo{spec.name, env_name(spec.name), value, value, spec.doc, layer_});
    }
    return infos;
  }
  Result<std::vector<OptionInfo>> effective() const override {
    auto config = resolve(Given{});
    if (!config) return std::unexpected(config.error());
    return describe(*config);
  }

  NamedOptions set_texts(const NamedOptions& named) const override {
    NamedOptions texts;
    for (const auto& spec : specs_)
      if (auto text = text_of(spec.name, Sources{&named, true})) texts.emplace(spec.name, std::move(*text));
    return texts;
  }
  Result<void> check_named(const NamedOptions& named) const override {
    auto config = resolve(Given{}, nullptr, Sources{&named, false});
    if (!config) return std::unexpected(config.error());
    return {};
  }
  std::vector<OptionInfo> describe_named(const NamedOptions& named) const override {
    std::vector<OptionInfo> infos = declared();
    for (OptionInfo& info : infos)
      if (auto it = named.find(info.name); it != named.end()) info.value = it->second;
    return infos;
  }

 private:
  static std::optional<std::string> text_of(const char* name, const Sources& sources) {
    if (sources.named)
      if (auto it = sources.named->find(std::string_view(name)); it != sources.named->end())
        return it->second;
    return sources.environment ? read_option_env(env_name(name)) : std::nullopt;
  }

  std::string layer_;
  std::vector<Spec<Config, Given>> specs_;
  Check check_;
};

// Every table of this library, in the order listings show them: context_tables(), then layers().
std::span<const Table* const> option_tables();
// The tables of the layers above the transports (bootstrap, coll, ...: src/library/builtin.cpp).
std::span<const Table* const> layers();

// The core's table (src/core/options.cpp).
const Table& core_table();
// The core's table followed by the table of each built transport that has one (src/core/options.cpp).
std::vector<const Table*> context_tables();
// resolve_config(), telling which options were set (in code or the environment) rather than defaulted: for
// a layer that passes a core option on only when it was named (the collectives' listen_address).
Result<Config> resolve_config(const Options& given, SetOptions& set);

}  // namespace rdmakit::options
