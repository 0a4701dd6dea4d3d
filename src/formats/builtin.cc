#include "formats/builtin.h"

namespace stoker {

void RegisterBuiltinFormats() {
  RegisterFolderFormat();
}

}  // namespace stoker
