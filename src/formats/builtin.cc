#include "formats/builtin.h"

namespace stoker {

void RegisterBuiltinFormats() {
  RegisterFolderFormat();
  RegisterWdsFormat();
  RegisterLmdbFormat();
  RegisterHdf5Format();
  RegisterParquetFormat();
}

}  // namespace stoker
