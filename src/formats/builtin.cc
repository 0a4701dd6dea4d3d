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
  RegisterKafkaFormat();
#endif
}

}  // namespace stoker
