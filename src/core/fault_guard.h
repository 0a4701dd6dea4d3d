// A memory fault (SIGSEGV, SIGBUS) inside a guarded call becomes a return value instead of
// a crash. For one job only: reading memory-mapped files through a library that trusts
// what it reads. liblmdb follows the page offsets and sizes of a damaged LMDB file without
// bounds checks, so a bad byte can send it outside the map; the dataset must then report
// the file as damaged (and skip mode count it), not take the training job down.
//
// The guarded function must not own resources that need cleanup at the fault (no C++
// objects with destructors live between the guard and the faulting access): after a fault,
// control jumps straight back to RunFaultGuarded. Faults outside a guarded call go to the
// handler that was installed before (a sanitizer's, Python's faulthandler, or the default).
#pragma once

namespace stoker {

// Runs fn(arg) on this thread. Returns 0 when it returned normally, or the signal number
// (SIGSEGV or SIGBUS) that interrupted it. Reentrant per thread (nested guards work).
int RunFaultGuarded(void (*fn)(void*), void* arg);

template <typename F>
int RunFaultGuarded(F& f) {
  return RunFaultGuarded([](void* p) { (*static_cast<F*>(p))(); }, &f);
}

}  // namespace stoker
