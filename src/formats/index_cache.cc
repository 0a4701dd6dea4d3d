#include "formats/index_cache.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "io/cache_env.h"
#include "io/object_env.h"

namespace stoker {

namespace {
std::string CacheDir() {
  if (const char* d = std::getenv("STOKER_INDEX_CACHE")) {
    std::string v(d);
    if (v == "off" || v == "0") return {};
    if (!v.empty()) return v;
  }
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/stoker/index";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/stoker/index";
  return {};
}
}  // namespace

std::string IndexCacheEntry(const std::string& url, uint64_t size, const std::string& version,
                            const char* kind) {
  if (!IsObjectStoreUri(url) || version.empty()) return {};
  std::string dir = CacheDir();
  if (dir.empty()) return {};
  return fmt::format("{}/{}-{}.idx", dir, CacheEntryKey(fmt::format("{}\n{}\n{}", url, size, version)),
                     kind);
}

bool ReadIndexCache(const std::string& entry, std::string* text) {
  if (entry.empty()) return false;
  std::ifstream f(entry, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  if (!f.good() && !f.eof()) return false;
  *text = ss.str();
  return !text->empty();
}

void WriteIndexCache(const std::string& entry, const std::string& text) {
  if (entry.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(entry).parent_path(), ec);
  if (ec) return;
  std::string tmp = fmt::format("{}.{}.tmp", entry, ::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return;
    f << text;
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), entry.c_str()) != 0) std::remove(tmp.c_str());
}

}  // namespace stoker
