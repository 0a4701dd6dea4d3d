// The real nvJPEG libraries against the table's symbol list (cuda_api.h). The build passes
// STOKER_NVJPEG_LIBS when it finds the CUDA 12 / 13 nvJPEG wheels install-deps.sh puts in
// ~/.cache/stoker-cuda-headers; libnvjpeg loads without a GPU.
// The types and the driver's symbol names are checked at compile time
// (cuda_api_header_check.cc); libcuda comes only with a driver, so its exports are checked
// on the GPU machine (bench/gpu/check.sh).
#include <dlfcn.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/cuda_api.h"

namespace stoker::gpu {
namespace {

// The symbol, or the older one the table falls back to.
[[maybe_unused]] bool Exports(void* h, const char* symbol, const char* older) {
  return ::dlsym(h, symbol) != nullptr || (older != nullptr && ::dlsym(h, older) != nullptr);
}

TEST(CudaApiHeaders, NvjpegExportsEveryListedSymbol) {
#ifndef STOKER_NVJPEG_LIBS
  GTEST_SKIP() << "no libnvjpeg found at configure time (scripts/install-deps.sh installs the "
                  "nvJPEG wheels into ~/.cache/stoker-cuda-headers)";
#else
  for (const char* lib : {STOKER_NVJPEG_LIBS}) {
    SCOPED_TRACE(lib);
    // RTLD_NODELETE: the library stays mapped after dlclose, so LeakSanitizer still sees
    // the pointers its static initializers keep (the statically linked C++ runtime's
    // 72 KiB exception pool was reported as a leak in the ASan build otherwise).
    void* h = ::dlopen(lib, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    ASSERT_NE(h, nullptr) << lib << ": " << ::dlerror();
    std::vector<std::string> missing;
    int n = 0;
#define STOKER_SYM(member, symbol, older) \
  ++n;                                    \
  if (!Exports(h, symbol, older)) missing.push_back(symbol);
    STOKER_NVJPEG_FUNCTIONS(STOKER_SYM)
#undef STOKER_SYM
    EXPECT_EQ(n, 21);
    EXPECT_TRUE(missing.empty()) << lib << " lacks " << testing::PrintToString(missing);
    // The check can fail: a name nvJPEG does not export is reported missing.
    EXPECT_EQ(::dlsym(h, "nvjpegDecodeJpegNoSuchCall"), nullptr);
    ::dlclose(h);
  }
#endif
}

TEST(CudaApiHeaders, LoadNamesTheMissingDriver) {
  // Here (no driver) or on a GPU machine told to look only at a name that is not there:
  // the error names the library and why, it does not crash. The table is process-wide, so
  // only run this where nothing loaded it yet (not on a GPU machine's earlier tests).
  CudaLibraryCandidates where;
  where.driver = {"libcuda-stoker-no-such-library.so.1"};
  auto r = LoadCudaApi(where);
  if (r.ok()) GTEST_SKIP() << "a CUDA table was already loaded in this process";
  EXPECT_NE(r.status().message().find("libcuda-stoker-no-such-library.so.1"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace stoker::gpu
