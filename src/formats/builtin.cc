#include "formats/builtin.h"

namespace stoker {

void RegisterBuiltinFormats() {
  RegisterFolderFormat();
#ifndef STOKER_ENGINE_ONLY
  RegisterWdsFormat();
  RegisterTFRecordFormat();
  RegisterLmdbFormat();
  RegisterHdf5Format();
  RegisterParquetFormat();
  RegisterDeltaFormat();
#endif
}

}  // namespace stoker
