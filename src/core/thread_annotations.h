// Clang thread-safety annotations (-Wthread-safety), as in leveldb's
// port/thread_annotations.h and abseil's base/thread_annotations.h. Other compilers see
// nothing. The clang build in scripts/test.sh compiles the engine with
// -Werror=thread-safety, so a member marked GUARDED_BY(mu_) read without mu_ held, or a
// function marked REQUIRES(mu_) called without it, does not compile there.
#pragma once

#if defined(__clang__) && !defined(SWIG)
#define STOKER_TSA(x) __attribute__((x))
#else
#define STOKER_TSA(x)
#endif

#ifndef CAPABILITY
#define CAPABILITY(x) STOKER_TSA(capability(x))
#endif
#ifndef SCOPED_CAPABILITY
#define SCOPED_CAPABILITY STOKER_TSA(scoped_lockable)
#endif
#ifndef GUARDED_BY
#define GUARDED_BY(x) STOKER_TSA(guarded_by(x))
#endif
#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(x) STOKER_TSA(pt_guarded_by(x))
#endif
#ifndef REQUIRES
#define REQUIRES(...) STOKER_TSA(requires_capability(__VA_ARGS__))
#endif
#ifndef ACQUIRE
#define ACQUIRE(...) STOKER_TSA(acquire_capability(__VA_ARGS__))
#endif
#ifndef RELEASE
#define RELEASE(...) STOKER_TSA(release_capability(__VA_ARGS__))
#endif
#ifndef EXCLUDES
#define EXCLUDES(...) STOKER_TSA(locks_excluded(__VA_ARGS__))
#endif
#ifndef ASSERT_CAPABILITY
#define ASSERT_CAPABILITY(x) STOKER_TSA(assert_capability(x))
#endif
#ifndef RETURN_CAPABILITY
#define RETURN_CAPABILITY(x) STOKER_TSA(lock_returned(x))
#endif
#ifndef NO_THREAD_SAFETY_ANALYSIS
#define NO_THREAD_SAFETY_ANALYSIS STOKER_TSA(no_thread_safety_analysis)
#endif
