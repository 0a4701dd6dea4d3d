// Internal to the executor: the per-sample work of the decode and augment stages, as
// functions of the options and the sample (no executor state).
#pragma once

#include <cstdint>
#include <cstddef>

#include "ops/image_ops.h"
#include "pipeline/pipeline.h"
#include "pipeline/stages.h"

namespace stoker {

// The label from Sample::label or a "cls" field ("  7\n"); -1 when there is none.
int64_t ParseLabel(const Sample& s);

// Label, crop and flip (pure functions of seed, epoch and the sample's index), then the
// decode of the crop's region. kRaw: only the label.
Status DecodeSample(const PipelineOptions& o, int epoch, Item* it);

// Writes the augmented sample into `dst` (image_bytes), or in kRaw the carried field into
// `raw_dst`. Returns the bytes written; Corrupt when kRaw finds no field to carry.
Status AugmentSample(const PipelineOptions& o, Item* it, void* dst,
                     std::vector<uint8_t>* raw_dst, ResizeScratch* scratch, size_t* bytes);

}  // namespace stoker
