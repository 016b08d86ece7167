// What every binding file of the rdmakit extension shares: turning rdmakit::Error into the Python
// exception hierarchy (rdmakit/errors.py), timeouts in seconds, and the per-area bind functions.
#pragma once

#include <pybind11/pybind11.h>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "rdmakit/error.hpp"

namespace rdmakit::python {

namespace py = pybind11;

// Thrown by the bindings; an exception translator raises the matching rdmakit.errors class.
struct RaisedError {
  Error error;
};

[[noreturn]] inline void raise(Error error) { throw RaisedError{std::move(error)}; }
[[noreturn]] inline void raise(Errc code, std::string message) { raise(Error(code, std::move(message))); }

// The long "None" time-out: waits happen in 100 ms slices, so Ctrl-C still works. (One definition for every
// binding file, so that the files also build as one translation unit: CMAKE_UNITY_BUILD.)
inline constexpr std::chrono::nanoseconds kForever = std::chrono::hours(24 * 365);

// Seconds (float) -> milliseconds, at least 1; zero, negative, NaN and over 10^9 s are refused naming `what`.
inline std::chrono::milliseconds positive_ms(double seconds, const char* what) {
  using namespace std::chrono;
  if (!(seconds > 0) || seconds > 1e9)
    raise(Errc::InvalidArgument, std::string(what) + " must be a positive number of seconds");
  return std::max(milliseconds(1), duration_cast<milliseconds>(duration<double>(seconds)));
}

template <typename T>
T unwrap(Result<T> result) {
  if (!result) raise(std::move(result.error()));
  if constexpr (!std::is_void_v<T>) return std::move(*result);
}

// An integer argument checked here, not by pybind11: a negative, oversized or non-integer value is
// rdmakit.InvalidArgumentError naming `name` and the range (pybind11 would say "incompatible function
// arguments", or wrap it into a range the caller did not mean). Accepts what has __index__ (numpy ints).
std::uint64_t checked_uint(py::handle value, const std::string& name, std::uint64_t max);
std::int64_t checked_int(py::handle value, const std::string& name, std::int64_t min, std::int64_t max);

template <std::integral T>
T int_arg(py::handle value, const std::string& name) {
  if constexpr (std::is_unsigned_v<T>)
    return static_cast<T>(checked_uint(value, name, std::numeric_limits<T>::max()));
  else
    return static_cast<T>(
        checked_int(value, name, std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
}
// None stays None.
template <std::integral T>
std::optional<T> optional_int_arg(py::handle value, const std::string& name) {
  if (value.is_none()) return std::nullopt;
  return int_arg<T>(value, name);
}

// The rdmakit.errors exception for `error`, made but not raised (per-request outcomes of a batch). Needs
// the GIL.
py::object exception_for(const Error& error);

// A timeout given in seconds (float). None: `fallback` (the bindings use a long one and wait in slices,
// so Ctrl-C still interrupts). Negative or NaN values are refused.
std::chrono::nanoseconds to_timeout(const std::optional<double>& seconds, std::chrono::nanoseconds fallback);

// Waits in slices of at most 100 ms with the GIL released, checking for signals (KeyboardInterrupt)
// between slices. `step` waits up to the given time and returns Errc::Timeout when nothing arrived.
template <typename Step>
auto wait_in_slices(std::chrono::nanoseconds timeout, Step step) -> decltype(step(timeout)) {
  constexpr std::chrono::nanoseconds kSlice = std::chrono::milliseconds(100);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const auto left = deadline - std::chrono::steady_clock::now();
    const auto slice =
        std::min<std::chrono::nanoseconds>(std::max<std::chrono::nanoseconds>(left, {}), kSlice);
    decltype(step(timeout)) result = [&] {
      py::gil_scoped_release unlocked;
      return step(slice);
    }();
    const bool timed_out = !result && result.error().code() == Errc::Timeout;
    if (!timed_out || left <= kSlice) return result;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

void bind_errors(py::module_& m);
void bind_core(py::module_& m);
void bind_connection(py::module_& m);
void bind_coll(py::module_& m);
void bind_ckpt(py::module_& m);
void bind_xfer_metadata(py::module_& m);
void bind_xfer_engine(py::module_& m);

}  // namespace rdmakit::python
