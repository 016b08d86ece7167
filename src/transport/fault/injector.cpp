// The rule book of a fault context: which operation gets which fault.
#include <string>

#include "rdmakit/fault.hpp"
#include "transport/fault/rule_book.hpp"

namespace rdmakit {
namespace {

using fault::Rule;

bool matches(const Rule& rule, std::optional<Opcode> opcode, std::uint32_t connection) {
  if (!opcode) return rule.connect;  // a connection attempt
  if (rule.connect) return false;
  if (rule.opcode && *rule.opcode != *opcode) return false;
  return !rule.connection || *rule.connection == connection;
}

}  // namespace

std::string_view fault::to_string(Rule::Action action) noexcept {
  switch (action) {
    case Rule::Action::Fail:
      return "fail";
    case Rule::Action::Delay:
      return "delay";
    case Rule::Action::Drop:
      return "drop";
    case Rule::Action::Disconnect:
      return "disconnect";
  }
  return "unknown";
}

Result<void> detail::FaultRuleBook::add(Rule rule) {
  if (rule.action == Rule::Action::Fail && rule.status == Status::Success)
    return fail(Errc::InvalidArgument, "fault rule: Fail needs a failure status, got success");
  if (rule.action == Rule::Action::Delay && rule.delay.count() <= 0)
    return fail(Errc::InvalidArgument, "fault rule: Delay needs a positive delay");
  if (rule.opcode && (*rule.opcode == Opcode::Recv || *rule.opcode == Opcode::RecvWriteImm))
    return fail(Errc::InvalidArgument,
                "fault rule: receives are not injected; match the SEND or WRITE_IMM instead");
  if (rule.connect && rule.opcode)
    return fail(Errc::InvalidArgument, "fault rule: a connect rule cannot match an opcode");
  std::lock_guard lock(mutex_);
  rules_.push_back(Armed{rule});
  return {};
}

void detail::FaultRuleBook::clear() {
  std::lock_guard lock(mutex_);
  rules_.clear();
}

std::uint64_t detail::FaultRuleBook::injected() const {
  std::lock_guard lock(mutex_);
  return injected_;
}

std::optional<Rule> detail::FaultRuleBook::match(std::optional<Opcode> opcode, std::uint32_t connection) {
  std::lock_guard lock(mutex_);
  for (Armed& armed : rules_) {
    if (!matches(armed.rule, opcode, connection)) continue;
    if (armed.rule.count != 0 && armed.fired >= armed.rule.count) continue;  // spent
    if (armed.seen++ < armed.rule.skip) continue;
    ++armed.fired;
    ++injected_;
    return armed.rule;
  }
  return std::nullopt;
}

fault::Injector::Injector() : book_(std::make_unique<detail::FaultRuleBook>()) {}
fault::Injector::~Injector() = default;
Result<void> fault::Injector::add(Rule rule) { return book_->add(rule); }
void fault::Injector::clear() { book_->clear(); }
std::uint64_t fault::Injector::injected() const { return book_->injected(); }

}  // namespace rdmakit
