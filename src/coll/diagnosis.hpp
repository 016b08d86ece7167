// Who is to blame when a collective fails. A rank that times out cannot tell from its own view: in a
// ring, the rank waiting for data from its left neighbour only knows that the neighbour stopped sending,
// not that the neighbour itself waits for a rank that stopped. So the ranks ask each other:
//  * on a timeout, a rank sends a Probe to every peer; each live rank answers Alive with the rank it is
//    waiting for. Following that wait chain from the rank this one waits for leads to the first rank that
//    did not answer (stopped, hung, never entered the collective) or whose connection failed (died);
//  * before a failing rank closes its connections it sends every peer a Notice naming the culprit, so the
//    peers that see the connection close blame the culprit and not the messenger.
// The messages ride in the immediate of zero-byte SENDs beside the credits (Exchange, exchange.hpp):
// bit 31 marks a control message, bits 24-30 its kind, bits 0-23 a rank. Plain functions, unit-tested
// in coll_diagnosis_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rdmakit::coll::detail {

enum class Control : std::uint8_t {
  Credit,          // not a control message: a credit count (the immediate's value)
  Probe,           // "who are you waiting for?"
  Alive,           // the answer: rank = the rank this one waits for (-1: none)
  NoticeDied,      // the sender fails the job: rank died (its connection failed)
  NoticeStalled,   // ... rank stopped responding
  NoticeOther,     // ... for another reason (rank: the one it blames, -1: none)
  NoticeAborted,   // ... because rank (the sender) aborts: its process exits on an error
  NoticeMismatch,  // ... because rank called the collective with other arguments than the sender
};

struct ControlMessage {
  Control kind = Control::Credit;
  int rank = -1;
};

std::uint32_t control_imm(Control kind, int rank) noexcept;
ControlMessage parse_control(std::uint32_t imm) noexcept;

// What one peer said to a probe.
struct Answer {
  enum State : std::uint8_t { Silent, Broken, Waiting } state = Silent;
  int waiting_for = -1;
};

struct Verdict {
  int rank = -1;      // the culprit; -1: every rank answered
  bool died = false;  // its connection failed (else it stayed silent)
  std::string chain;  // the wait chain followed, e.g. "1 -> 0 -> 2"
};

// answers[q] for every rank q (answers[self] is ignored); `first` is the rank `self` waits for.
Verdict find_culprit(int self, int first, const std::vector<Answer>& answers);

}  // namespace rdmakit::coll::detail
