// The pure logic of blaming a rank: the control messages' encoding beside the credits, and the wait chain
// followed from the answers to a probe.
#include <gtest/gtest.h>

#include "coll/diagnosis.hpp"

namespace rdmakit::coll::detail {
namespace {

using A = Answer;

TEST(CollDiagnosis, CreditsAreNotControlMessages) {
  for (std::uint32_t credit : {0u, 1u, 4u, 0x7fffffffu})
    EXPECT_EQ(parse_control(credit).kind, Control::Credit);
}

TEST(CollDiagnosis, ControlMessagesRoundTripWithOrWithoutARank) {
  for (Control kind :
       {Control::Probe, Control::Alive, Control::NoticeDied, Control::NoticeStalled, Control::NoticeOther})
    for (int rank : {-1, 0, 7, (1 << 24) - 2}) {
      ControlMessage m = parse_control(control_imm(kind, rank));
      EXPECT_EQ(m.kind, kind);
      EXPECT_EQ(m.rank, rank);
    }
}

TEST(CollDiagnosis, AnUnknownKindIsReadAsAFailureNotice) {
  EXPECT_EQ(parse_control(0xff000003u).kind, Control::NoticeOther);
  EXPECT_EQ(parse_control(0xff000003u).rank, 3);
}

// Rank 2 of 3 stopped: rank 1 waits for 0, which waits for 2, which is silent.
TEST(CollDiagnosis, TheChainLeadsPastTheNeighbourToTheSilentRank) {
  std::vector<A> answers{{A::Waiting, 2}, {}, {A::Silent, -1}};
  Verdict v = find_culprit(1, 0, answers);
  EXPECT_EQ(v.rank, 2);
  EXPECT_FALSE(v.died);
  EXPECT_EQ(v.chain, "1 -> 0 -> 2");
}

TEST(CollDiagnosis, ABrokenConnectionMeansTheRankDied) {
  std::vector<A> answers{{}, {A::Waiting, 3}, {A::Waiting, 1}, {A::Broken, -1}};
  Verdict v = find_culprit(0, 2, answers);
  EXPECT_EQ(v.rank, 3);
  EXPECT_TRUE(v.died);
  EXPECT_EQ(v.chain, "0 -> 2 -> 1 -> 3");
}

TEST(CollDiagnosis, ACycleOfLiveRanksBlamesASilentRankOutsideIt) {
  std::vector<A> answers{{}, {A::Waiting, 0}, {A::Silent, -1}};
  Verdict v = find_culprit(0, 1, answers);
  EXPECT_EQ(v.rank, 2);
  EXPECT_EQ(v.chain, "0 -> 1");
}

TEST(CollDiagnosis, EveryRankAnsweringBlamesNone) {
  std::vector<A> answers{{}, {A::Waiting, 2}, {A::Waiting, 1}};
  Verdict v = find_culprit(0, 1, answers);
  EXPECT_EQ(v.rank, -1);
  EXPECT_EQ(v.chain, "0 -> 1 -> 2");
}

TEST(CollDiagnosis, AnswersNamingNoRankOrOutOfRangeEndTheChain) {
  EXPECT_EQ(find_culprit(0, 1, {{}, {A::Waiting, -1}}).rank, -1);
  EXPECT_EQ(find_culprit(0, 1, {{}, {A::Waiting, 99}}).rank, -1);
  EXPECT_EQ(find_culprit(0, 5, {{}, {A::Waiting, 0}}).rank, -1);
}

}  // namespace
}  // namespace rdmakit::coll::detail
