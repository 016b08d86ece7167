#include "core/log.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

namespace rdmakit {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::Warn)};
std::mutex g_sink_mutex;
LogSink g_sink;  // guarded by g_sink_mutex; empty = stderr

constexpr std::string_view level_name(LogLevel level) {
  switch (level) {
    case LogLevel::Error:
      return "error";
    case LogLevel::Warn:
      return "warn";
    case LogLevel::Info:
      return "info";
    case LogLevel::Debug:
      return "debug";
  }
  return "?";
}

}  // namespace

void set_log_sink(LogSink sink) {
  std::lock_guard lock(g_sink_mutex);
  g_sink = std::move(sink);
}

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }

namespace log {

bool enabled(LogLevel level) noexcept {
  return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}

void write(LogLevel level, std::string_view subsystem, std::string_view message) {
  if (!enabled(level)) return;
  std::lock_guard lock(g_sink_mutex);
  if (g_sink) {
    g_sink(level, subsystem, message);
    return;
  }
  std::string line = "rdmakit " + std::string(level_name(level)) + " [" + std::string(subsystem) + "] " +
                     std::string(message) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

std::string printable(std::string_view text, std::size_t limit) {
  constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(std::min(text.size(), limit) + 3);
  for (std::size_t i = 0; i < text.size() && i < limit; ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (text.size() > limit) out += "...";
  return out;
}

bool parse_level(std::string_view text, LogLevel& level) noexcept {
  for (LogLevel candidate : {LogLevel::Error, LogLevel::Warn, LogLevel::Info, LogLevel::Debug}) {
    if (text == level_name(candidate)) {
      level = candidate;
      return true;
    }
  }
  return false;
}

}  // namespace log
}  // namespace rdmakit
