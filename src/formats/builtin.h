// Registration of the built-in dataset formats. Each format file defines a
// Register<Name>Format() function; RegisterBuiltinFormats calls them all once.
#pragma once

namespace stoker {

void RegisterFolderFormat();
void RegisterBuiltinFormats();

}  // namespace stoker
