#include "formats/unavailable.h"

namespace stoker {

Status FormatUnavailable(const MissingLibrary& m, const std::string& path) {
  return Unimplemented("{}: stoker was built without {} ({}): format '{}' is unavailable", path,
                       m.library, m.how, m.format);
}

}  // namespace stoker
