// A folder of files. ImageFolder layout (root/<class>/<file>) gives integer labels from
// the sorted class directory names, exactly as torchvision.datasets.ImageFolder does;
// files directly under root get label -1. Key = path relative to root without the
// extension; the one field is named by the lower-case extension ("jpg", "png", ...).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/dataset.h"

namespace stoker {

class FolderDataset final : public Dataset {
 public:
  static Result<std::unique_ptr<FolderDataset>> Open(const std::string& root,
                                                     const DatasetOptions& opts);
  uint64_t size() const override { return files_.size(); }
  const std::vector<ShardInfo>& shards() const override { return shards_; }
  Status Read(uint64_t index, Sample* out) const override;
  std::string Key(uint64_t index) const override;
  std::string Location(uint64_t index) const override;
  std::string format() const override { return "folder"; }
  bool random_access_is_cheap() const override { return true; }

  const std::vector<std::string>& classes() const { return classes_; }
  // Relative path of sample i.
  const std::string& relpath(uint64_t i) const { return files_[i].rel; }

 private:
  struct Entry {
    std::string rel;
    int32_t label;
  };
  std::string root_;
  Env* env_ = nullptr;
  std::vector<std::string> classes_;
  std::vector<Entry> files_;
  std::vector<ShardInfo> shards_;
};

// Extensions a folder dataset picks up (torchvision's IMG_EXTENSIONS plus text fields).
bool IsFolderSampleExtension(const std::string& ext);

}  // namespace stoker
