#include "formats/dataset.h"

#include <cstdint>
#include <algorithm>
#include <mutex>

#include "formats/builtin.h"

namespace stoker {

Field* Sample::AddField(const std::string& name) {
  if (num_fields == fields.size()) fields.emplace_back();
  Field* f = &fields[num_fields++];
  f->name = name;
  f->data.clear();
  return f;
}

const Field* Sample::Find(const std::string& name) const {
  for (size_t i = 0; i < num_fields; ++i)
    if (fields[i].name == name) return &fields[i];
  return nullptr;
}

const Field* Sample::FindAny(std::initializer_list<const char*> names) const {
  for (const char* n : names)
    if (const Field* f = Find(n)) return f;
  return nullptr;
}

uint64_t Sample::bytes() const {
  uint64_t b = 0;
  for (size_t i = 0; i < num_fields; ++i) b += fields[i].data.size();
  return b;
}

namespace {
std::mutex& RegistryMu() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, DatasetFormat>& Registry() {
  static std::map<std::string, DatasetFormat> r;
  return r;
}
void EnsureBuiltins() {
  static std::once_flag once;
  std::call_once(once, [] { RegisterBuiltinFormats(); });
}
}  // namespace

void RegisterDatasetFormat(DatasetFormat fmt) {
  std::lock_guard<std::mutex> lk(RegistryMu());
  std::string name = fmt.name;
  Registry()[name] = std::move(fmt);
}

const std::map<std::string, DatasetFormat>& DatasetFormats() {
  EnsureBuiltins();
  return Registry();
}

std::pair<std::string, std::string> SplitFormatPrefix(const std::string& spec) {
  auto colon = spec.find(':');
  if (colon != std::string::npos && colon > 0) {
    std::string name = spec.substr(0, colon);
    const auto& reg = DatasetFormats();
    if (reg.count(name)) return {name, spec.substr(colon + 1)};
  }
  return {"", spec};
}

Result<std::unique_ptr<Dataset>> OpenDataset(const std::string& spec,
                                             const DatasetOptions& opts_in) {
  DatasetOptions opts = opts_in;
  if (!opts.env) opts.env = Env::Default();
  const auto& reg = DatasetFormats();
  auto [name, path] = SplitFormatPrefix(spec);
  if (path.empty()) return InvalidArgument("empty dataset path in '{}'", spec);
  if (name.empty()) {
    // A brace pattern or an extension names the format; a directory is a folder dataset
    // unless it holds only shards of one format.
    std::string probe = path;
    if (path.find('{') != std::string::npos) {
      auto expanded = ExpandBraces(path);
      if (!expanded.ok()) return expanded.status();
      if (!expanded->empty()) probe = expanded->front();
    }
    auto st = opts.env->Stat(probe);
    if (st.ok() && st->is_dir) {
      name = "folder";
      // A flat directory whose data files all have one registered shard extension
      // (index and manifest files aside) is that format: a directory of .tar shards → wds.
      auto entries = opts.env->ListDir(probe);
      if (entries.ok()) {
        std::string found;
        bool mixed = false, any_dir = false;
        for (const auto& e : *entries) {
          if (e.is_dir) {
            any_dir = true;
            continue;
          }
          std::string ext = Extension(e.name);
          if (ext == "gz") ext = Extension(e.name.substr(0, e.name.size() - 3));
          std::string fmt_of;
          for (const auto& [n, f] : reg)
            for (const auto& x : f.extensions)
              if (x == ext) fmt_of = n;
          if (fmt_of.empty()) continue;  // .idx, .json, ...
          if (!found.empty() && found != fmt_of) mixed = true;
          found = fmt_of;
        }
        if (!any_dir && !mixed && !found.empty()) name = found;
      }
    } else {
      std::string ext = Extension(probe);
      if (ext == "gz") {
        // foo.tfrecord.gz → tfrecord
        std::string base = probe.substr(0, probe.size() - 3);
        ext = Extension(base);
      }
      for (const auto& [n, f] : reg)
        for (const auto& e : f.extensions)
          if (e == ext) name = n;
      if (name.empty()) {
        if (!st.ok() && path.find('{') == std::string::npos) return st.status();
        return InvalidArgument(
            "cannot tell the format of '{}': use a prefix such as wds:, folder:, tfrecord:",
            spec);
      }
    }
  }
  auto it = reg.find(name);
  if (it == reg.end()) return InvalidArgument("unknown dataset format '{}'", name);
  return it->second.open(path, opts);
}

namespace {

Status ExpandOne(const std::string& p, std::vector<std::string>* out, int depth) {
  if (depth > 8) return InvalidArgument("brace pattern '{}' nests too deeply", p);
  auto open = p.find('{');
  if (open == std::string::npos) {
    if (p.find('}') != std::string::npos)
      return InvalidArgument("unbalanced '}}' in pattern '{}'", p);
    out->push_back(p);
    return Status::OK();
  }
  auto close = p.find('}', open);
  if (close == std::string::npos) return InvalidArgument("unbalanced '{{' in pattern '{}'", p);
  std::string head = p.substr(0, open), body = p.substr(open + 1, close - open - 1),
              tail = p.substr(close + 1);
  if (body.find('{') != std::string::npos)
    return InvalidArgument("nested braces are not supported in '{}'", p);
  std::vector<std::string> alts;
  auto dots = body.find("..");
  if (dots != std::string::npos) {
    std::string a = body.substr(0, dots), b = body.substr(dots + 2);
    auto is_num = [](const std::string& s) {
      return !s.empty() && s.size() < 19 &&
             s.find_first_not_of("0123456789") == std::string::npos;
    };
    if (!is_num(a) || !is_num(b))
      return InvalidArgument("bad range '{{{}}}' in pattern '{}'", body, p);
    uint64_t lo = std::stoull(a), hi = std::stoull(b);
    if (hi < lo) return InvalidArgument("empty range '{{{}}}' in pattern '{}'", body, p);
    if (hi - lo > 10000000) return InvalidArgument("range '{{{}}}' is too large", body);
    size_t width = (a.size() > 1 && a[0] == '0') || a.size() == b.size() ? a.size() : 0;
    for (uint64_t v = lo; v <= hi; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < width) s = std::string(width - s.size(), '0') + s;
      alts.push_back(s);
    }
  } else {
    size_t start = 0;
    for (;;) {
      auto comma = body.find(',', start);
      alts.push_back(body.substr(start, comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  for (const auto& alt : alts) STOKER_RETURN_IF_ERROR(ExpandOne(head + alt + tail, out, depth + 1));
  return Status::OK();
}

// Names a pattern expands to (product over its braces), saturating at `cap + 1`; malformed
// braces count as 1 (ExpandOne reports them).
uint64_t CountExpansions(const std::string& p, uint64_t cap) {
  uint64_t total = 1;
  size_t pos = 0;
  for (;;) {
    size_t open = p.find('{', pos);
    if (open == std::string::npos) return total;
    size_t close = p.find('}', open);
    if (close == std::string::npos) return total;
    std::string body = p.substr(open + 1, close - open - 1);
    uint64_t n = 1;
    size_t dots = body.find("..");
    if (dots != std::string::npos) {
      std::string a = body.substr(0, dots), b = body.substr(dots + 2);
      auto num = [](const std::string& s) {
        return !s.empty() && s.size() < 19 && s.find_first_not_of("0123456789") == std::string::npos;
      };
      if (num(a) && num(b) && std::stoull(b) >= std::stoull(a)) n = std::stoull(b) - std::stoull(a) + 1;
    } else {
      n = 1 + static_cast<uint64_t>(std::count(body.begin(), body.end(), ','));
    }
    total = n > (cap + 1) / total ? cap + 1 : total * n;
    if (total > cap) return total;
    pos = close + 1;
  }
}

}  // namespace

Result<std::vector<std::string>> ExpandBraces(const std::string& pattern) {
  // More names than any real shard list: a mistyped range must not exhaust memory
  // (brace_fuzz found "{0..9588}...{0..9588}", 92 million names).
  constexpr uint64_t kMaxNames = 1u << 20;
  if (CountExpansions(pattern, kMaxNames) > kMaxNames)
    return InvalidArgument("brace pattern '{}' expands to more than {} names", pattern, kMaxNames);
  std::vector<std::string> out;
  STOKER_RETURN_IF_ERROR(ExpandOne(pattern, &out, 0));
  return out;
}

}  // namespace stoker
