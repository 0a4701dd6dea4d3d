// LD_PRELOAD helper for bench/gpu/diag.sh: on SIGSEGV/SIGBUS print the native backtrace of the
// faulting thread (glibc backtrace_symbols_fd, async-signal-safe enough for a crash report),
// then die with the signal as before. Installed at load, so the handlers Python and stoker
// install later chain to it.
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static void on_fault(int sig) {
  static const char msg[] = "\n== native backtrace (segv_backtrace.so) ==\n";
  void* frames[64];
  int n;
  if (write(2, msg, sizeof msg - 1) < 0) return;
  n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  // On an alternate stack, so a stack overflow is reported too.
  static char alt[1 << 16];
  stack_t ss;
  struct sigaction sa;
  ss.ss_sp = alt;
  ss.ss_size = sizeof alt;
  ss.ss_flags = 0;
  sigaltstack(&ss, NULL);
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_fault;
  sa.sa_flags = SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
}
