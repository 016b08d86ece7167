// Logging hooks: where rdmakit's messages go. By default warnings and errors go to stderr.
#pragma once

#include <functional>
#include <string_view>

namespace rdmakit {

enum class LogLevel : unsigned char { Error = 0, Warn = 1, Info = 2, Debug = 3 };

// Replaces the sink (nullptr restores stderr). Tests install one that fails on unexpected warnings.
using LogSink = std::function<void(LogLevel level, std::string_view subsystem, std::string_view message)>;
void set_log_sink(LogSink sink);
void set_log_level(LogLevel level);

}  // namespace rdmakit
