#include "pipeline/sample_ops.h"

#include <cstdint>
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
  CropRect crop;
  CenterCropPlan center;
  // The crop is drawn on the image as shown: EXIF-rotated when asked.
  int width = info.width, height = info.height;
  if (o.exif_orientation) DisplayedSize(info, &width, &height);
  if (o.mode == DecodeMode::kTrain) {
    Rng crop_rng(o.seed, static_cast<uint64_t>(epoch), it->index, kStreamCrop);
    crop = RandomResizedCropRect(width, height, o.rrc, crop_rng);
    req = CropDecodeRequest(crop, o.output, o.dct_scale);
    Rng flip_rng(o.seed, static_cast<uint64_t>(epoch), it->index, kStreamFlip);
    it->flip = flip_rng.Uniform() < o.flip_prob;
  } else {
    center = CenterCropRectFor(width, height, o.val_resize, o.image_size);
    req = CenterCropDecodeRequest(center, o.output, o.dct_scale);
    it->flip = false;
  }
  req.allow_region_decode = o.region_decode;
  req.exif_orientation = o.exif_orientation;
  STOKER_RETURN_IF_ERROR(DecodeImage(f->data.data(), f->data.size(), req, &it->image));
  it->resize = o.mode == DecodeMode::kTrain ? CropResizePlan(it->image, crop)
                                            : CenterCropResizePlan(it->image, center);
  if (it->resize.box.w <= 0 || it->resize.box.h <= 0) {
    return Internal("decoded region does not cover the crop");
  }
  return Status::OK();
}

Status AugmentSample(const PipelineOptions& o, Item* it, void* dst,
                     std::vector<uint8_t>* raw_dst, ResizeScratch* scratch, size_t* bytes) {
  if (raw_dst) {
    Field* field = o.raw_field.empty()
                       ? (it->sample.num_fields ? &it->sample.fields[0] : nullptr)
                       : const_cast<Field*>(it->sample.Find(o.raw_field));
    // The field's bytes move to the slot without a copy; the sample gets the slot's old
    // buffer (recycled by the assembler) to read its next sample into.
    raw_dst->clear();
    if (field) std::swap(*raw_dst, field->data);
    *bytes = raw_dst->size();
    if (!field)
      return Corrupt("no field '{}' to carry", o.raw_field.empty() ? "(any)" : o.raw_field);
    return Status::OK();
  }
  ApplyResizePlan(it->image, it->resize, it->flip, o.output, dst, scratch);
  *bytes = o.output.bytes();
  return Status::OK();
}

}  // namespace stoker
