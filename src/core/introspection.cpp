// The public structs' listings by name: a transport's counters in ConnectionStats, and every field of
// Capabilities, so that tools and the Python bindings print them from one place.
#include <cstdio>
#include <iterator>

#include "rdmakit/connection.hpp"
#include "rdmakit/context.hpp"

namespace rdmakit {
namespace {

// The number of fields of an aggregate: the most initializers that T{...} accepts (each AnyField
// converts to any field's type). Declared only: it is used in unevaluated contexts.
struct AnyField {
  template <typename T>
  operator T() const;  // NOLINT(google-explicit-constructor)
};
template <typename T, typename... Fields>
constexpr std::size_t field_count() {
  if constexpr (requires { T{Fields{}..., AnyField{}}; })
    return field_count<T, Fields..., AnyField>();
  else
    return sizeof...(Fields);
}

CapabilityInfo flag(const char* name, bool value) { return {name, value, value ? "yes" : "no"}; }
CapabilityInfo number(const char* name, std::uint64_t value) { return {name, value, std::to_string(value)}; }
// A declared figure, or "undeclared" for 0 (the layers that use it assume tcp's).
CapabilityInfo figure(const char* name, double value) {
  char text[32] = "undeclared";
  if (value > 0) std::snprintf(text, sizeof text, "%g", value);
  return {name, value, text};
}

}  // namespace

std::optional<std::uint64_t> ConnectionStats::counter(std::string_view name) const noexcept {
  for (const TransportCounter& c : transport_counters)
    if (c.name == name) return c.value;
  return std::nullopt;
}

std::vector<CapabilityInfo> describe_capabilities(const Capabilities& c) {
  std::vector<CapabilityInfo> rows = {
      flag("one_sided_without_target_cpu", c.one_sided_without_target_cpu),
      flag("atomics_coherent_with_cpu", c.atomics_coherent_with_cpu),
      flag("kernel_bypass", c.kernel_bypass),
      flag("device_keys", c.device_keys),
      flag("flushes_receives_posted_in_error", c.flushes_receives_posted_in_error),
      flag("peer_death_announced", c.peer_death_announced),
      number("max_message_size", c.max_message_size),
      number("max_sge", c.max_sge),
      number("max_inline", c.max_inline),
      flag("misaligned_atomic_refused_at_post", c.misaligned_atomic_refused_at_post),
      {"address_prefix", c.address_prefix, c.address_prefix.empty() ? "(none)" : c.address_prefix},
      flag("same_host_only", c.same_host_only),
      number("progress_threads", c.progress_threads),
      {"device_memory_path", c.device_memory_path, c.device_memory_path},
      figure("message_cost_us", c.message_cost_us),
      figure("bandwidth_bytes_per_us", c.bandwidth_bytes_per_us),
  };
  return rows;
}

// The list above names every field: one added to Capabilities without its row stops the build here
// (tests/info/check_capabilities.sh checks the names against the header).
static_assert(field_count<Capabilities>() == 16,
              "rdmakit::Capabilities gained or lost a field: list it in describe_capabilities()");

}  // namespace rdmakit
