// Registration of the built-in dataset formats. Each format file defines a
// Register<Name>Format() function; RegisterBuiltinFormats calls them all once.
#pragma once

namespace stoker {

void RegisterFolderFormat();
void RegisterWdsFormat();
void RegisterTFRecordFormat();
void RegisterLmdbFormat();
void RegisterHdf5Format();
void RegisterParquetFormat();
void RegisterDeltaFormat();
void RegisterKafkaFormat();
void RegisterBuiltinFormats();

}  // namespace stoker
