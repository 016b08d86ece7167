// main() of every test program: gtest, the warning check, and a watchdog that aborts with a message
// when the program runs past RDMAKIT_TEST_WATCHDOG_S seconds (default 600). Before it aborts, the watchdog
// prints every thread's stack of the program and of its child processes (with gdb, when installed): a hang
// seen once on a CI machine must say where it was.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace rdmakit::testing {
void install_log_check();
}

namespace {

const char* g_current_test = "(none)";
std::string g_stack_dump_command;  // built before the alarm: the handler may only fork, exec and wait

class CurrentTest : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo& info) override {
    static std::string name;
    name = std::string(info.test_suite_name()) + "." + info.name();
    g_current_test = name.c_str();
  }
};

// A shell loop over this process and its children: each one's command line, each thread's state and kernel
// stack (a thread blocked in the kernel shows where), and, through gdb (bounded by `timeout`), every thread's
// backtrace, on stderr.
std::string stack_dump_command(pid_t self) {
  std::string pid = std::to_string(self);
  return "command -v gdb > /dev/null || { echo 'WATCHDOG: gdb not installed: no stacks'; exit 0; }; "
         "for p in " +
         pid + " $(pgrep -P " + pid +
         " | grep -vx $$); do "
         "echo \"WATCHDOG: stacks of pid $p: $(tr '\\0' ' ' < /proc/$p/cmdline)\"; "
         "for t in /proc/$p/task/*; do "
         "echo \"thread ${t##*/}: state $(cut -d' ' -f3 $t/stat) in $(cat $t/wchan)\"; cat $t/stack "
         "2>/dev/null; "
         "done; "
         "timeout 60 gdb -p $p -batch -nx -ex 'thread apply all bt' 2>&1 | grep -E '^(#|Thread )'; "
         "done 1>&2";
}

void dump_stacks() {
  pid_t child = fork();
  if (child == 0) {
    execl("/bin/sh", "sh", "-c", g_stack_dump_command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  if (child > 0) {
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

void on_alarm(int) {
  const char prefix[] = "\nWATCHDOG: test program hung; running test: ";
  (void)!write(2, prefix, sizeof(prefix) - 1);
  (void)!write(2, g_current_test, std::strlen(g_current_test));
  (void)!write(2, "\n", 1);
  dump_stacks();
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
  g_stack_dump_command = stack_dump_command(getpid());
  // Under Yama's ptrace_scope 1 a debugger started by this process may not attach to it otherwise.
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  std::signal(SIGALRM, on_alarm);
  alarm(seconds);
  return RUN_ALL_TESTS();
}
