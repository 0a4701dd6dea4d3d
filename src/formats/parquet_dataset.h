// Parquet datasets through Apache Arrow's C++ Parquet library. Debian bookworm has no
// libarrow-dev, so CMake takes the headers and libarrow.so.N / libparquet.so.N from the
// pyarrow wheel in the venv (cmake/StokerHelpers.cmake); without pyarrow the format is
// registered but opening fails with a message saying how to enable it.
//
// Layout: one row per sample. Column "key" (string/binary) → Sample::key, "label"
// (int32/int64) → Sample::label, every other flat column is a field named after the
// column: binary/string/fixed-size binary → its bytes; int32/int64/float/double/bool →
// the little-endian bytes of the value. Null values leave the field out of the sample.
// Nested or repeated columns are skipped (reported by index_errors()).
//
// Random access by row: row-group index + offset. When the file has a page index
// (OffsetIndex; stoker's writer writes one, pyarrow does with write_page_index=True) and
// the column chunk has no dictionary page, one sample costs one page read; otherwise the
// reader skips from the start of the row group. Sequential reads keep a cursor per
// reading thread. The writer writes uncompressed, non-dictionary pages of ~64 KiB (one page per image-sized value)
// in row groups of ~32 MiB (training reads are mostly of already-compressed JPEG bytes).
// All file I/O goes through Env (an arrow::io adapter).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/writer.h"

namespace stoker {

bool ParquetAvailable();
Result<std::unique_ptr<Dataset>> OpenParquetDataset(const std::string& path,
                                                    const DatasetOptions& opts);
// Reads only the columns named in `columns` ("key" and "label" only when named); names the
// file lacks are ignored, and a selection may leave no field column. For readers whose
// data files are Parquet (Delta Lake: column selection, partition columns kept apart).
Result<std::unique_ptr<Dataset>> OpenParquetDatasetColumns(const std::string& path,
                                                           const DatasetOptions& opts,
                                                           const std::vector<std::string>& columns);
Result<std::unique_ptr<DatasetWriter>> OpenParquetWriter(const std::string& path,
                                                         const WriterOptions& opts);
// Pages of `ds` (a Parquet dataset) read so far by direct page reads; -1 if `ds` is not a
// Parquet dataset. For tests.
int ParquetDirectPages(const Dataset& ds);

}  // namespace stoker
