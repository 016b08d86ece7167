// Logging hooks: where rdmakit's messages go. By default warnings and errors go to stderr.
#pragma once

#include <functional>
#include <string_view>

#include "rdmakit/export.hpp"

namespace rdmakit {

enum class LogLevel : unsigned char { Error = 0, Warn = 1, Info = 2, Debug = 3 };

// Replaces the sink (nullptr restores stderr). Tests install one that fails on unexpected warnings.
using LogSink = std::function<void(LogLevel level, std::string_view subsystem, std::string_view message)>;
RDMAKIT_API void set_log_sink(LogSink sink);
// The least severe level shown, for the whole process (default Warn). Context::open changes it too, but only
// for a context whose log_level option was set (Options::log_level or RDMAKIT_LOG_LEVEL): the last such
// context opened wins, and a context opened with the default leaves the level as it is.
RDMAKIT_API void set_log_level(LogLevel level);

}  // namespace rdmakit
