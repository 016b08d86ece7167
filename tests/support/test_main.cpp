// main() of every test program: gtest, the warning check, and a watchdog that aborts with a message
// when the program runs past RDMAKIT_TEST_WATCHDOG_S seconds (default 600).
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace rdmakit::testing {
void install_log_check();
}

namespace {

const char* g_current_test = "(none)";

class CurrentTest : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo& info) override {
    static std::string name;
    name = std::string(info.test_suite_name()) + "." + info.name();
    g_current_test = name.c_str();
  }
};

void on_alarm(int) {
  const char prefix[] = "\nWATCHDOG: test program hung; running test: ";
  (void)!write(2, prefix, sizeof(prefix) - 1);
  (void)!write(2, g_current_test, std::strlen(g_current_test));
  (void)!write(2, "\n", 1);
  std::_Exit(124);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::UnitTest::GetInstance()->listeners().Append(new CurrentTest);
  rdmakit::testing::install_log_check();
  unsigned seconds = 600;
  if (const char* env = std::getenv("RDMAKIT_TEST_WATCHDOG_S"))
    seconds = static_cast<unsigned>(std::atoi(env));
  std::signal(SIGALRM, on_alarm);
  alarm(seconds);
  return RUN_ALL_TESTS();
}
