#include "formats/builtin.h"

namespace stoker {

void RegisterBuiltinFormats() {
  RegisterFolderFormat();
  RegisterWdsFormat();
  RegisterTFRecordFormat();
  RegisterLmdbFormat();
  RegisterHdf5Format();
  RegisterParquetFormat();
}

}  // namespace stoker
