// Internal logging: named subsystems, a runtime level, and a sink that tests can replace.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "rdmakit/log.hpp"

namespace rdmakit::log {

bool enabled(LogLevel level) noexcept;
void write(LogLevel level, std::string_view subsystem, std::string_view message);

inline void error(std::string_view subsystem, std::string_view message) {
  write(LogLevel::Error, subsystem, message);
}
inline void warn(std::string_view subsystem, std::string_view message) {
  write(LogLevel::Warn, subsystem, message);
}
inline void info(std::string_view subsystem, std::string_view message) {
  if (enabled(LogLevel::Info)) write(LogLevel::Info, subsystem, message);
}
inline void debug(std::string_view subsystem, std::string_view message) {
  if (enabled(LogLevel::Debug)) write(LogLevel::Debug, subsystem, message);
}

// Text from outside (a peer's name, say) made safe for one log line: control, quote, backslash and
// non-ASCII bytes become \xNN, and anything past `limit` bytes becomes "...".
std::string printable(std::string_view text, std::size_t limit = 64);

// Parses "error|warn|info|debug".
bool parse_level(std::string_view text, LogLevel& level) noexcept;

}  // namespace rdmakit::log
