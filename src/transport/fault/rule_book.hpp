// The rule book behind a public fault::Injector: the rules, their counts, and the match the fault
// transport makes for every operation and connection attempt.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "rdmakit/fault.hpp"

namespace rdmakit::detail {

class FaultRuleBook {
 public:
  static FaultRuleBook& of(fault::Injector& injector) noexcept { return *injector.book_; }

  Result<void> add(fault::Rule rule);
  void clear();
  std::uint64_t injected() const;
  // The rule that fires for this operation (or connection attempt when `opcode` is empty), if any. Counts
  // skips and firings.
  std::optional<fault::Rule> match(std::optional<Opcode> opcode, std::uint32_t connection);

 private:
  struct Armed {
    fault::Rule rule{};
    std::uint32_t seen = 0;   // matching operations met so far
    std::uint32_t fired = 0;  // injections made
  };
  mutable std::mutex mutex_;
  std::vector<Armed> rules_;
  std::uint64_t injected_ = 0;
};

}  // namespace rdmakit::detail
