#include "core/fault_guard.h"

#include <setjmp.h>
#include <signal.h>

#include <cstring>
#include <mutex>

namespace stoker {
namespace {

thread_local sigjmp_buf* t_guard = nullptr;
struct sigaction g_prev_segv, g_prev_bus;

void Forward(int sig, siginfo_t* info, void* ctx) {
  const struct sigaction& prev = sig == SIGSEGV ? g_prev_segv : g_prev_bus;
  if ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction) {
    prev.sa_sigaction(sig, info, ctx);
    return;
  }
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN && prev.sa_handler) {
    prev.sa_handler(sig);
    return;
  }
  // Default action: restore it; returning re-runs the faulting access, which then crashes
  // (with a core dump) as it would have without us.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
}

void Handler(int sig, siginfo_t* info, void* ctx) {
  if (sigjmp_buf* jb = t_guard) {
    t_guard = nullptr;
    siglongjmp(*jb, sig);
  }
  Forward(sig, info, ctx);
}

void Install() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = Handler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_prev_segv);
  sigaction(SIGBUS, &sa, &g_prev_bus);
}

}  // namespace

int RunFaultGuarded(void (*fn)(void*), void* arg) {
  static std::once_flag once;
  std::call_once(once, Install);
  sigjmp_buf jb;
  sigjmp_buf* const outer = t_guard;
  // sigsetjmp(…, 1) saves the signal mask, so the blocked SIGSEGV is unblocked again
  // when the handler jumps back here.
  int sig = sigsetjmp(jb, 1);
  if (sig == 0) {
    t_guard = &jb;
    fn(arg);
  }
  t_guard = outer;
  return sig;
}

}  // namespace stoker
