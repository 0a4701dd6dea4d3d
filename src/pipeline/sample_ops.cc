#include "pipeline/sample_ops.h"

#include <algorithm>
#include <charconv>

#include "core/random.h"
#include "pipeline/plan.h"

namespace stoker {

int64_t ParseLabel(const Sample& s) {
  if (s.label >= 0) return s.label;
  const Field* f = s.Find("cls");
  if (!f) return -1;
  const char* b = reinterpret_cast<const char*>(f->data.data());
  const char* e = b + f->data.size();
  while (b < e && (*b == ' ' || *b == '\n' || *b == '\r' || *b == '\t')) ++b;
  while (e > b && (e[-1] == ' ' || e[-1] == '\n' || e[-1] == '\r' || e[-1] == '\t')) --e;
  int64_t v = -1;
  auto r = std::from_chars(b, e, v);
  if (r.ec != std::errc() || r.ptr != e) return -1;
  return v;
}

Status DecodeSample(const PipelineOptions& o, int epoch, Item* it) {
  const Sample& s = it->sample;
  it->label = ParseLabel(s);
  if (o.mode == DecodeMode::kRaw) return Status::OK();
  const Field* f = s.FindAny({"jpg", "jpeg", "png"});
  if (!f) {
    std::string have;
    for (size_t i = 0; i < s.num_fields; ++i) have += (i ? ", " : "") + s.fields[i].name;
    return Corrupt("no image field (jpg, jpeg, png); the sample has: {}",
                   have.empty() ? "no fields" : have);
  }
  if (f->data.empty()) return Corrupt("empty image field '{}'", f->name);
  STOKER_ASSIGN_OR_RETURN(ImageInfo info, ReadImageInfo(f->data.data(), f->data.size()));
  if (info.width < 1 || info.height < 1) return Corrupt("image has no pixels");
  DecodeRequest req;
  req.allow_dct_scale = o.dct_scale;
  req.allow_region_decode = o.region_decode;
  req.target_w = req.target_h = o.image_size;
  if (o.mode == DecodeMode::kTrain) {
    Rng crop_rng(o.seed, static_cast<uint64_t>(epoch), it->index, kStreamCrop);
    req.crop = RandomResizedCropRect(info.width, info.height, o.rrc, crop_rng);
    Rng flip_rng(o.seed, static_cast<uint64_t>(epoch), it->index, kStreamFlip);
    it->flip = flip_rng.Uniform() < o.flip_prob;
  } else {
    CenterCropPlan plan = CenterCropRectFor(info.width, info.height, o.val_resize, o.image_size);
    req.crop = plan.source_rect;
    it->flip = false;
  }
  STOKER_RETURN_IF_ERROR(DecodeImage(f->data.data(), f->data.size(), req, &it->image));
  const DecodedImage& img = it->image;
  DecodedRect r = SourceToDecoded(img, req.crop.x, req.crop.y, req.crop.w, req.crop.h);
  it->src_x = std::max(0.0, r.x);
  it->src_y = std::max(0.0, r.y);
  // Clamp into the decoded pixels (rounding at the image's right/bottom edge).
  it->src_w = std::min(r.w, img.width - it->src_x);
  it->src_h = std::min(r.h, img.height - it->src_y);
  if (it->src_w <= 0 || it->src_h <= 0) return Internal("decoded region does not cover the crop");
  return Status::OK();
}

Status AugmentSample(const PipelineOptions& o, Item* it, void* dst,
                     std::vector<uint8_t>* raw_dst, ResizeScratch* scratch, size_t* bytes) {
  if (raw_dst) {
    const Field* field = o.raw_field.empty()
                             ? (it->sample.num_fields ? &it->sample.fields[0] : nullptr)
                             : it->sample.Find(o.raw_field);
    raw_dst->clear();
    if (field) raw_dst->insert(raw_dst->end(), field->data.begin(), field->data.end());
    *bytes = raw_dst->size();
    if (!field)
      return Corrupt("no field '{}' to carry", o.raw_field.empty() ? "(any)" : o.raw_field);
    return Status::OK();
  }
  ResizeFlipNormalize(it->image, it->src_x, it->src_y, it->src_w, it->src_h, it->flip, o.output,
                      dst, scratch);
  *bytes = o.output.bytes();
  return Status::OK();
}

}  // namespace stoker
