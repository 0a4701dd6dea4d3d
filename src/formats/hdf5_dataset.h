// HDF5 datasets (the HDF5 C library, Debian libhdf5-dev 1.10).
//
// Layout (what the writer produces and what h5py users write, see docs/storage.md):
// datasets at the root group, all with the sample count N as their first dimension:
//   /key    N       variable-length string (or fixed-length string): Sample::key
//   /label  N       integer: Sample::label
//   /<name> N       variable-length uint8 (h5py.vlen_dtype(np.uint8)) or string: one
//                   bytes field per sample, e.g. /jpg
//   /<name> N x ... fixed-shape numeric array: the field is the raw row (C order, native
//                   byte order), e.g. /image N x 32 x 32 x 3 uint8
// The writer creates /key, /label and one chunked vlen uint8 dataset per field.
//
// The HDF5 C library is not thread-safe unless built with --enable-threadsafe (Debian's
// serial build is not): every HDF5 call in stoker goes through one process-wide mutex.
// Reads avoid it where they can: for unfiltered datasets libhdf5 only says where the raw
// bytes lie (contiguous address, chunk addresses, and for variable-length data the global
// heap object a row refers to) and stoker preads them through Env, in parallel and
// straight into the sample's buffer (see FastCol in hdf5_dataset.cc); other datasets are
// read through libhdf5 under the lock. Handles are never used across fork(): a child
// process closes the inherited ones and reopens the file on first read.
#pragma once

#include <memory>
#include <string>

#include "formats/dataset.h"
#include "formats/writer.h"

namespace stoker {

bool Hdf5Available();
Result<std::unique_ptr<Dataset>> OpenHdf5Dataset(const std::string& path,
                                                 const DatasetOptions& opts);
// Writes one file `path` (as path.partial, renamed at Close). Every sample must have the
// same field names as the first one.
Result<std::unique_ptr<DatasetWriter>> OpenHdf5Writer(const std::string& path,
                                                      const WriterOptions& opts);
// Columns of `ds` (an HDF5 dataset) read by direct preads instead of libhdf5; -1 if `ds`
// is not an HDF5 dataset. For tests.
int Hdf5DirectColumns(const Dataset& ds);

}  // namespace stoker
