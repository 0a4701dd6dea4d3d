#include "delta_binding.h"

#include <cstdint>
#include <pybind11/stl.h>

#include "errors.h"
#include "formats/delta_dataset.h"

namespace stoker::py {
namespace pyb = pybind11;
using namespace pybind11::literals;

namespace {

pyb::dict SnapshotToDict(const DeltaSnapshot& s, bool with_files) {
  pyb::dict d("table"_a = s.table, "version"_a = s.version, "timestamp_ms"_a = s.timestamp_ms,
              "num_files"_a = s.files.size(), "checkpoint"_a = s.checkpoint, "notes"_a = s.notes);
  if (with_files) {
    pyb::list files;
    for (const auto& f : s.files) {
      pyb::dict part;
      for (const auto& [k, v] : f.partition) part[pyb::str(k)] = v ? pyb::object(pyb::str(*v)) : pyb::none();
      files.append(pyb::dict("path"_a = f.path, "size"_a = f.size, "version"_a = f.version,
                             "partition"_a = part));
    }
    d["files"] = files;
  }
  return d;
}

}  // namespace

pyb::object DeltaInfo(const Dataset& ds) {
  const DeltaSnapshot* s = DeltaSnapshotOf(ds);
  if (!s) return pyb::none();
  return SnapshotToDict(*s, false);
}

void RegisterDelta(pyb::module_& m) {
  m.def("delta_latest_version", [](const std::string& table) {
    Result<int64_t> r = Status(StatusCode::kInternal, "unset");
    {
      pyb::gil_scoped_release nogil;
      r = LatestDeltaVersion(Env::Default(), table);
    }
    return ValueOrThrow(std::move(r));
  }, "table"_a, "The newest version in the table's _delta_log.");
  m.def("delta_snapshot", [](const std::string& spec) {
    auto parsed = ValueOrThrow(ParseDeltaSpec(spec));
    Result<DeltaSnapshot> r = Status(StatusCode::kInternal, "unset");
    {
      pyb::gil_scoped_release nogil;
      r = LoadDeltaSnapshot(Env::Default(), parsed.table, parsed.snapshot);
    }
    return SnapshotToDict(ValueOrThrow(std::move(r)), true);
  }, "spec"_a, "The snapshot a Delta spec (<table>?version=...) resolves to, with its files.");
}

}  // namespace stoker::py
