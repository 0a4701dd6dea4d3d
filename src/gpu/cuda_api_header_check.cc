// Compile-only: gpu::CudaApi (cuda_api.h), the table the GPU path fills with dlopen/dlsym,
// checked against the real cuda.h and nvjpeg.h. Built (never linked into anything) when
// CMake finds both headers (STOKER_CUDA_HEADER_CHECK; scripts/install-deps.sh puts the
// nvidia-cuda-runtime-cu12 and nvidia-nvjpeg-cu12 wheels' headers in a cache, about 9 MB).
// A mismatch is a compile error naming the member.
//
// What is checked, for every member of the two X-macro lists:
//   - the function pointer type against decltype(&realFunction): same arity and, per
//     parameter and return type, the same type, except that where the real header has an
//     enum we have an int of the same size (the values are pinned below), and that our
//     layout-identical copies of nvjpegImage_t and the allocator structs stand for the real
//     ones (their layouts are pinned below too);
//   - the symbol cuda_api.cc passes to dlsym against the name the real header maps the
//     plain name to (cuMemAlloc -> cuMemAlloc_v2), without per-thread default streams;
// and every constant cuda_api.h hard-codes against the real enumerator.
#include <cstddef>
#include <iterator>
#include <type_traits>

#include "gpu/cuda_api.h"

// Our member types, captured before cuda.h turns the member names into macros.
namespace ours {
#define STOKER_OURS(member, symbol, older) using member##_t = decltype(stoker::gpu::CudaApi::member);
STOKER_CUDA_DRIVER_FUNCTIONS(STOKER_OURS)
STOKER_NVJPEG_FUNCTIONS(STOKER_OURS)
#undef STOKER_OURS
}  // namespace ours

#undef CUDA_API_PER_THREAD_DEFAULT_STREAM  // the legacy entry points, as cuda_api.cc loads
#include <cuda.h>
// nvjpeg.h includes cuda_runtime_api.h for one name, cudaStream_t; that header needs the
// crt/ headers, which ship with the toolkit or the nvcc wheel (about 100 MB), not with the
// runtime wheel. Without them, cudaStream_t is declared as driver_types.h declares it (the
// runtime's stream is the driver's CUstream_st), and cuda_runtime_api.h is skipped.
#if __has_include(<crt/host_defines.h>)
#include <cuda_runtime_api.h>
#define STOKER_CHECKED_WITH_RUNTIME_API 1
#else
#define __CUDA_RUNTIME_API_H__
typedef struct CUstream_st* cudaStream_t;
#endif
#include <nvjpeg.h>

namespace {

namespace g = stoker::gpu;

// Our struct T stands for the real struct R (layouts compared below).
template <class T, class R> struct Stands : std::false_type {};
template <> struct Stands<g::nvjpegImage_t, ::nvjpegImage_t> : std::true_type {};
template <> struct Stands<g::NvjpegDevAllocator, ::nvjpegDevAllocator_t> : std::true_type {};
template <> struct Stands<g::NvjpegPinnedAllocator, ::nvjpegPinnedAllocator_t> : std::true_type {};

template <class O, class R> constexpr bool SameFn();

template <class O, class R>
constexpr bool SameType() {
  if constexpr (std::is_same_v<O, R>) {
    return true;
  } else if constexpr (std::is_enum_v<R> && std::is_integral_v<O>) {
    return !std::is_same_v<O, bool> && sizeof(O) == sizeof(R) && alignof(O) == alignof(R);
  } else if constexpr (std::is_pointer_v<O> && std::is_pointer_v<R>) {
    using PO = std::remove_pointer_t<O>;
    using PR = std::remove_pointer_t<R>;
    if constexpr (std::is_function_v<PO> && std::is_function_v<PR>) {
      return SameFn<O, R>();
    } else {
      return std::is_const_v<PO> == std::is_const_v<PR> &&
             std::is_volatile_v<PO> == std::is_volatile_v<PR> &&
             SameType<std::remove_cv_t<PO>, std::remove_cv_t<PR>>();
    }
  } else {
    return Stands<O, R>::value;
  }
}

template <class O, class R> struct FnMatch : std::false_type {};
template <class RO, class... AO, class RR, class... AR>
struct FnMatch<RO (*)(AO...), RR (*)(AR...)> {
  static constexpr bool Args() {
    if constexpr (sizeof...(AO) != sizeof...(AR)) {
      return false;
    } else {
      return (SameType<AO, AR>() && ... && true);
    }
  }
  static constexpr bool value = SameType<RO, RR>() && Args();
};

template <class O, class R>
constexpr bool SameFn() {
  return FnMatch<O, R>::value;
}

constexpr bool StrEq(const char* a, const char* b) {
  if (a == nullptr || b == nullptr) return a == b;
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}

#define STOKER_STR2(x) #x
#define STOKER_STR(x) STOKER_STR2(x)  // the argument macro-expanded first: the real symbol

// `member` is expanded where it is not pasted or stringified: decltype(&member) is the
// real declaration (cuMemAlloc -> cuMemAlloc_v2), STOKER_STR(member) its symbol. Where the
// table names an older symbol too, the older one must have the same signature (it is what
// an older driver gives): checked below for the one such entry.
#define STOKER_CHECK(member, symbol, older)                                                 \
  static_assert(SameFn<ours::member##_t, decltype(&member)>(),                              \
                "CudaApi::" #member " does not match its declaration in cuda.h/nvjpeg.h");  \
  static_assert(StrEq(symbol, STOKER_STR(member)) || StrEq(older, STOKER_STR(member)),      \
                "CudaApi::" #member " is loaded as " symbol " but the header maps it to "   \
                STOKER_STR(member));
STOKER_CUDA_DRIVER_FUNCTIONS(STOKER_CHECK)
STOKER_NVJPEG_FUNCTIONS(STOKER_CHECK)
#undef STOKER_CHECK

#if CUDA_VERSION >= 12080
static_assert(SameFn<ours::cuEventElapsedTime_t, decltype(&cuEventElapsedTime_v2)>());
#endif

// Scalar types.
static_assert(std::is_same_v<g::CUdevice, ::CUdevice>);
static_assert(std::is_same_v<g::CUdeviceptr, ::CUdeviceptr>);
static_assert(std::is_same_v<g::CUcontext, ::CUcontext>);
static_assert(std::is_same_v<g::CUstream, ::CUstream>);
static_assert(std::is_same_v<g::CUstream, ::cudaStream_t>);  // nvJPEG takes runtime streams
static_assert(std::is_same_v<g::CUevent, ::CUevent>);
static_assert(std::is_same_v<g::CUmodule, ::CUmodule>);
static_assert(std::is_same_v<g::CUfunction, ::CUfunction>);
static_assert(std::is_same_v<g::nvjpegHandle_t, ::nvjpegHandle_t>);
static_assert(std::is_same_v<g::nvjpegJpegState_t, ::nvjpegJpegState_t>);
static_assert(std::is_same_v<g::nvjpegJpegDecoder_t, ::nvjpegJpegDecoder_t>);
static_assert(std::is_same_v<g::nvjpegJpegStream_t, ::nvjpegJpegStream_t>);
static_assert(std::is_same_v<g::nvjpegDecodeParams_t, ::nvjpegDecodeParams_t>);
static_assert(std::is_same_v<g::nvjpegBufferPinned_t, ::nvjpegBufferPinned_t>);
static_assert(std::is_same_v<g::nvjpegBufferDevice_t, ::nvjpegBufferDevice_t>);
static_assert(sizeof(g::CUresult) == sizeof(::CUresult));
static_assert(sizeof(g::nvjpegStatus_t) == sizeof(::nvjpegStatus_t));

// Constants.
static_assert(g::kCudaSuccess == CUDA_SUCCESS);
static_assert(g::kCudaErrorOutOfMemory == CUDA_ERROR_OUT_OF_MEMORY);
static_assert(g::kCudaErrorNotReady == CUDA_ERROR_NOT_READY);
static_assert(g::kEventDisableTiming == CU_EVENT_DISABLE_TIMING);
static_assert(g::kStreamNonBlocking == CU_STREAM_NON_BLOCKING);
static_assert(g::kNvjpegSuccess == NVJPEG_STATUS_SUCCESS);
static_assert(int{g::kNvjpegBackendDefault} == int{NVJPEG_BACKEND_DEFAULT});
static_assert(int{g::kNvjpegBackendHybrid} == int{NVJPEG_BACKEND_HYBRID});
static_assert(int{g::kNvjpegBackendGpuHybrid} == int{NVJPEG_BACKEND_GPU_HYBRID});
static_assert(g::kNvjpegOutputRgbi == NVJPEG_OUTPUT_RGBI);

// Layouts of the structs we copy.
static_assert(sizeof(g::nvjpegImage_t) == sizeof(::nvjpegImage_t));
static_assert(alignof(g::nvjpegImage_t) == alignof(::nvjpegImage_t));
static_assert(std::size(g::nvjpegImage_t{}.channel) == NVJPEG_MAX_COMPONENT);
static_assert(std::size(g::nvjpegImage_t{}.pitch) == NVJPEG_MAX_COMPONENT);
static_assert(offsetof(g::nvjpegImage_t, channel) == offsetof(::nvjpegImage_t, channel));
static_assert(offsetof(g::nvjpegImage_t, pitch) == offsetof(::nvjpegImage_t, pitch));
static_assert(std::is_same_v<decltype(g::nvjpegImage_t::channel), decltype(::nvjpegImage_t::channel)>);
static_assert(std::is_same_v<decltype(g::nvjpegImage_t::pitch), decltype(::nvjpegImage_t::pitch)>);
static_assert(sizeof(g::NvjpegDevAllocator) == sizeof(::nvjpegDevAllocator_t));
static_assert(offsetof(g::NvjpegDevAllocator, dev_malloc) == offsetof(::nvjpegDevAllocator_t, dev_malloc));
static_assert(offsetof(g::NvjpegDevAllocator, dev_free) == offsetof(::nvjpegDevAllocator_t, dev_free));
static_assert(SameFn<decltype(g::NvjpegDevAllocator::dev_malloc), ::tDevMalloc>());
static_assert(SameFn<decltype(g::NvjpegDevAllocator::dev_free), ::tDevFree>());
static_assert(sizeof(g::NvjpegPinnedAllocator) == sizeof(::nvjpegPinnedAllocator_t));
static_assert(offsetof(g::NvjpegPinnedAllocator, pinned_malloc) ==
              offsetof(::nvjpegPinnedAllocator_t, pinned_malloc));
static_assert(offsetof(g::NvjpegPinnedAllocator, pinned_free) ==
              offsetof(::nvjpegPinnedAllocator_t, pinned_free));
static_assert(SameFn<decltype(g::NvjpegPinnedAllocator::pinned_malloc), ::tPinnedMalloc>());
static_assert(SameFn<decltype(g::NvjpegPinnedAllocator::pinned_free), ::tPinnedFree>());

// The checker itself: it must reject what differs (an int for a pointer, a missing
// argument, a const dropped, a wrong struct), or the checks above prove nothing.
static_assert(!SameFn<int (*)(int), CUresult (*)(CUdevice*)>());
static_assert(!SameFn<int (*)(int*), CUresult (*)(CUdevice*, int)>());
static_assert(!SameFn<int (*)(void*), CUresult (*)(const void*)>());
static_assert(!SameFn<int (*)(g::nvjpegImage_t*), int (*)(::nvjpegDevAllocator_t*)>());
static_assert(!SameFn<long (*)(), CUresult (*)()>());
static_assert(SameFn<int (*)(unsigned), decltype(&cuInit)>());

}  // namespace
