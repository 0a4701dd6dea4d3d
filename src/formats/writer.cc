#include "formats/writer.h"

#include <mutex>

namespace stoker {
namespace {
std::mutex& Mu() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, DatasetWriterFactory>& Writers() {
  static std::map<std::string, DatasetWriterFactory> w;
  return w;
}
}  // namespace

void RegisterDatasetWriter(const std::string& format, DatasetWriterFactory f) {
  std::lock_guard<std::mutex> lk(Mu());
  Writers()[format] = std::move(f);
}

std::vector<std::string> DatasetWriterFormats() {
  (void)DatasetFormats();  // registers the built-in formats and their writers
  std::lock_guard<std::mutex> lk(Mu());
  std::vector<std::string> out;
  for (const auto& [k, v] : Writers()) out.push_back(k);
  return out;
}

Result<std::unique_ptr<DatasetWriter>> OpenDatasetWriter(const std::string& spec,
                                                         const WriterOptions& opts_in) {
  (void)DatasetFormats();
  WriterOptions opts = opts_in;
  if (!opts.env) opts.env = Env::Default();
  auto colon = spec.find(':');
  if (colon == std::string::npos)
    return InvalidArgument("output '{}' needs a format prefix, e.g. wds:out/train-%06d.tar", spec);
  std::string fmt = spec.substr(0, colon), path = spec.substr(colon + 1);
  DatasetWriterFactory f;
  {
    std::lock_guard<std::mutex> lk(Mu());
    auto it = Writers().find(fmt);
    if (it == Writers().end()) return InvalidArgument("no writer for format '{}'", fmt);
    f = it->second;
  }
  return f(path, opts);
}

}  // namespace stoker
