// How the core opens transports without knowing any. Each transport folder defines one registration
// function returning a Registration ({name, summary, open}); the library's assembly file
// (src/library/builtin.cpp) is the one place that names the built ones, and Context::open looks the
// configured name up here. The list is an explicit array of function calls, not static initializers, so
// the linker keeps every transport in the shared library, the static library and a consumer's link alike.
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "rdmakit/context.hpp"

namespace rdmakit::options {
class Table;
}

namespace rdmakit::transport {

struct Registration {
  std::string_view name;      // what Config::transport names: "tcp", or "fault" for "fault:<inner>"
  std::string_view summary;   // one line for rdmakit-info
  bool wraps_inner = false;   // opened as "<name>:<inner>": it wraps a context of another transport
  bool picks_device = false;  // its option "device" names one of several devices (verbs)
  // The transport's own options (src/transport/<name>/options.cpp), or nullptr when it has none: listed
  // by describe_options(), set by name (Options::set), carried in Config::transport_options.
  const options::Table* options = nullptr;
  // Opens a context; `config.transport` is the full name (e.g. "fault:tcp").
  Result<std::shared_ptr<Context>> (*open)(const Config& config) = nullptr;
};

// Every transport built into this library, in the order tools list them (src/library/builtin.cpp).
std::span<const Registration> builtin();

// Opens the transport that `config.transport` names. An unknown or unbuilt name is Errc::NotSupported
// naming those built.
Result<std::shared_ptr<Context>> open(const Config& config);

}  // namespace rdmakit::transport
