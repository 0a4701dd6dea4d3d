// LMDB datasets (liblmdb): one key per sample in a single memory-mapped B+tree file.
//
// Two layouts are read:
//  * stoker layout (written by LmdbWriter, marked by the key "__stoker__"): key
//    "%010llu" (the sample index, so cursor order is index order) → a value holding the
//    sample key, label and named fields (EncodeLmdbSample below; docs/storage.md).
//  * any other LMDB (e.g. written with the Python `lmdb` binding): every key not starting
//    with "__" is one sample, in LMDB key order; the value is one field whose name is
//    sniffed from its bytes ("jpg", "png", else "data"); label -1.
//
// Process and thread rules (lmdb.h "Caveats"): an MDB_env is used only in the process
// that opened it. The dataset records the pid at open and transparently reopens the env
// in a forked child (the inherited handle is left alone, never closed in the child).
// The env is opened MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS: no lock file is touched (so
// the file must not be written while it is read), and read-only transactions are not tied
// to threads; they are pooled (mdb_txn_reset / mdb_txn_renew) so each reading thread
// holds its own. LMDB does its own I/O through mmap, not through Env.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/writer.h"

namespace stoker {

// stoker's LMDB value: "STK1", u32 key_len, key, i64 label, u32 num_fields, then per
// field u16 name_len, name, u32 data_len, data (all little-endian).
void EncodeLmdbSample(const Sample& s, std::string* out);
// Decodes a value; kCorrupt describing what is wrong (the caller adds file and record).
Status DecodeLmdbSample(const uint8_t* data, size_t n, Sample* out);
// "jpg", "png" or "data" from the first bytes of a raw value.
const char* SniffFieldName(const uint8_t* data, size_t n);

bool LmdbAvailable();
// Opens an LMDB file (MDB_NOSUBDIR) or directory (holding data.mdb).
Result<std::unique_ptr<Dataset>> OpenLmdbDataset(const std::string& path,
                                                 const DatasetOptions& opts);
// Writes stoker's layout to one file `path` (written as path.partial, renamed at Close).
Result<std::unique_ptr<DatasetWriter>> OpenLmdbWriter(const std::string& path,
                                                      const WriterOptions& opts);
// Number of times `ds` (an LMDB dataset) opened its env: 1, plus one per forked child
// process that read from it. -1 if `ds` is not an LMDB dataset. For tests.
int LmdbEnvOpens(const Dataset& ds);

}  // namespace stoker
