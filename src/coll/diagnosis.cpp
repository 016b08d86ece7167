#include "coll/diagnosis.hpp"

namespace rdmakit::coll::detail {
namespace {

constexpr std::uint32_t kControlBit = 1u << 31;
constexpr std::uint32_t kRankMask = (1u << 24) - 1;  // all ones: no rank

bool silent_or_broken(const Answer& answer) { return answer.state != Answer::Waiting; }

Verdict blame(int rank, const std::vector<Answer>& answers, std::string chain) {
  return Verdict{rank, answers[static_cast<std::size_t>(rank)].state == Answer::Broken, std::move(chain)};
}

}  // namespace

std::uint32_t control_imm(Control kind, int rank) noexcept {
  std::uint32_t who = rank < 0 ? kRankMask : static_cast<std::uint32_t>(rank) & kRankMask;
  return kControlBit | (static_cast<std::uint32_t>(kind) << 24) | who;
}

ControlMessage parse_control(std::uint32_t imm) noexcept {
  if ((imm & kControlBit) == 0) return ControlMessage{Control::Credit, -1};
  auto kind = static_cast<Control>((imm >> 24) & 0x7f);
  if (kind < Control::Probe || kind > Control::NoticeMismatch) kind = Control::NoticeOther;
  std::uint32_t who = imm & kRankMask;
  return ControlMessage{kind, who == kRankMask ? -1 : static_cast<int>(who)};
}

Verdict find_culprit(int self, int first, const std::vector<Answer>& answers) {
  auto n = static_cast<int>(answers.size());
  std::vector<bool> seen(answers.size(), false);
  std::string chain = std::to_string(self);
  for (int q = first; q >= 0 && q < n && q != self && !seen[static_cast<std::size_t>(q)];
       q = answers[static_cast<std::size_t>(q)].waiting_for) {
    seen[static_cast<std::size_t>(q)] = true;
    chain += " -> " + std::to_string(q);
    if (silent_or_broken(answers[static_cast<std::size_t>(q)])) return blame(q, answers, chain);
  }
  // The chain closed on itself (or ended at a rank waiting for nothing): any rank that did not answer
  // still explains the stall better than none.
  for (int q = 0; q < n; ++q)
    if (q != self && silent_or_broken(answers[static_cast<std::size_t>(q)])) return blame(q, answers, chain);
  return Verdict{-1, false, chain};
}

}  // namespace rdmakit::coll::detail
