#include "formats/folder.h"

#include <cstdint>
#include <algorithm>

#include "formats/builtin.h"

namespace stoker {

bool IsFolderSampleExtension(const std::string& ext) {
  static const char* kExt[] = {"jpg", "jpeg", "png", "ppm", "bmp", "pgm", "tif",
                               "tiff", "webp"};
  for (const char* e : kExt)
    if (ext == e) return true;
  return false;
}

namespace {

Status Walk(Env* env, const std::string& root, const std::string& rel, int32_t label,
            std::vector<std::pair<std::string, int32_t>>* out, int depth) {
  if (depth > 32) return InvalidArgument("{}: directory tree too deep", JoinPath(root, rel));
  STOKER_ASSIGN_OR_RETURN(auto entries, env->ListDir(rel.empty() ? root : JoinPath(root, rel)));
  for (const auto& e : entries) {
    std::string r = rel.empty() ? e.name : rel + "/" + e.name;
    if (e.is_dir) {
      STOKER_RETURN_IF_ERROR(Walk(env, root, r, label, out, depth + 1));
    } else if (IsFolderSampleExtension(Extension(e.name))) {
      out->push_back({r, label});
    }
  }
  return Status::OK();
}

}  // namespace

Result<std::unique_ptr<FolderDataset>> FolderDataset::Open(const std::string& root_in,
                                                           const DatasetOptions& opts) {
  std::unique_ptr<FolderDataset> ds(new FolderDataset());
  std::string root = root_in;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  ds->root_ = root;
  ds->env_ = opts.env ? opts.env : Env::Default();
  STOKER_ASSIGN_OR_RETURN(auto entries, ds->env_->ListDir(root));
  std::vector<std::pair<std::string, int32_t>> files;
  for (const auto& e : entries) {
    if (e.is_dir) {
      int32_t label = static_cast<int32_t>(ds->classes_.size());
      ds->classes_.push_back(e.name);
      STOKER_RETURN_IF_ERROR(Walk(ds->env_, root, e.name, label, &files, 1));
    } else if (IsFolderSampleExtension(Extension(e.name))) {
      files.push_back({e.name, -1});
    }
  }
  if (files.empty())
    return InvalidArgument("{}: no image files found (expected root/<class>/<image>)", root);
  ds->files_.reserve(files.size());
  for (auto& [rel, label] : files) ds->files_.push_back({std::move(rel), label});
  ds->shards_.push_back({root, 0, ds->files_.size()});
  return ds;
}

Status FolderDataset::Read(uint64_t index, Sample* out) const {
  out->Clear();
  if (index >= files_.size()) return InvalidArgument("sample index {} out of range", index);
  const Entry& e = files_[index];
  std::string path = JoinPath(root_, e.rel);
  out->key = Key(index);
  out->location = path;
  out->label = e.label;
  Field* f = out->AddField(Extension(e.rel));
  auto file = env_->NewRandomAccessFile(path);
  if (!file.ok()) return file.status();
  f->data.resize((*file)->size());
  return (*file)->ReadExact(0, f->data.size(), f->data.data());
}

std::string FolderDataset::Key(uint64_t index) const {
  const std::string& rel = files_[index].rel;
  auto dot = rel.find_last_of('.');
  auto slash = rel.find_last_of('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return rel;
  return rel.substr(0, dot);
}

std::string FolderDataset::Location(uint64_t index) const {
  return JoinPath(root_, files_[index].rel);
}

void RegisterFolderFormat() {
  RegisterDatasetFormat({"folder",
                         {},
                         [](const std::string& path, const DatasetOptions& opts)
                             -> Result<std::unique_ptr<Dataset>> {
                           auto r = FolderDataset::Open(path, opts);
                           if (!r.ok()) return r.status();
                           return std::unique_ptr<Dataset>(std::move(r).value());
                         },
                         "a directory of image files in ImageFolder layout"});
}

}  // namespace stoker
