#include "options.h"

#include <pybind11/stl.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "cuda_host.h"
#include "errors.h"
#include "pipeline/options_schema.h"

namespace stoker::py {
namespace pyb = pybind11;
using namespace pybind11::literals;

namespace {

OptionValue FromPython(const pyb::handle& v) {
  OptionValue r;
  std::string repr = pyb::repr(v);
  if (v.is_none()) {
    r = OptionValue::Auto();
  } else if (pyb::isinstance<pyb::bool_>(v)) {
    r = OptionValue::Bool(v.cast<bool>());
  } else if (pyb::isinstance<pyb::int_>(v)) {
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    r = overflow ? OptionValue::Other(repr) : OptionValue::Int(x);
  } else if (pyb::isinstance<pyb::float_>(v)) {
    r = OptionValue::Double(v.cast<double>());
  } else if (pyb::isinstance<pyb::str>(v)) {
    r = OptionValue::String(v.cast<std::string>());
  } else if (pyb::isinstance<pyb::sequence>(v) && !pyb::isinstance<pyb::bytes>(v)) {
    std::vector<double> list;
    bool ok = true;
    for (auto e : v.cast<pyb::sequence>()) {
      // Numbers, and anything float() takes (numpy scalars), but not bools or strings.
      if (pyb::isinstance<pyb::bool_>(e) || pyb::isinstance<pyb::str>(e)) {
        ok = false;
        break;
      }
      double x = PyFloat_AsDouble(e.ptr());
      if (x == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        ok = false;
        break;
      }
      list.push_back(x);
    }
    r = ok ? OptionValue::List(std::move(list)) : OptionValue::Other(repr);
  } else {
    r = OptionValue::Other(repr);
  }
  r.repr = repr;
  return r;
}

pyb::object ToPython(const OptionValue& v) {
  switch (v.kind) {
    case OptionValue::Kind::kAuto: return pyb::str("auto");
    case OptionValue::Kind::kBool: return pyb::bool_(v.b);
    case OptionValue::Kind::kInt: return pyb::int_(v.i);
    case OptionValue::Kind::kDouble: return pyb::float_(v.d);
    case OptionValue::Kind::kString: return pyb::str(v.s);
    case OptionValue::Kind::kList: {
      pyb::list l;
      for (double d : v.list) l.append(d);
      return pyb::tuple(l);
    }
    case OptionValue::Kind::kOther: return pyb::none();
  }
  return pyb::none();
}

}  // namespace

PyPipelineOptions OptionsFromDict(const pyb::dict& d) {
  PyPipelineOptions r;
  std::vector<std::pair<std::string, OptionValue>> values;
  for (auto item : d) {
    if (!pyb::isinstance<pyb::str>(item.first))
      throw StatusError(InvalidArgument("pipeline option names are strings, got {}",
                                        std::string(pyb::repr(item.first))));
    std::string k = item.first.cast<std::string>();
    if (k == "pinned") {
      if (!pyb::isinstance<pyb::bool_>(item.second))
        throw StatusError(InvalidArgument("pinned must be True or False, got {}",
                                          std::string(pyb::repr(item.second))));
      r.pinned = item.second.cast<bool>();
      continue;
    }
    values.emplace_back(std::move(k), FromPython(item.second));
  }
  r.opts = ValueOrThrow(OptionsFromValues(values));
  r.opts.output.width = r.opts.output.height = r.opts.image_size;
  if (r.pinned) r.opts.allocator = ValueOrThrow(CudaPinnedAllocator());
  return r;
}

pyb::dict OptionsToDict(const PipelineOptions& o) {
  pyb::dict d;
  for (const auto& s : PipelineOptionSchema()) d[pyb::str(s.name)] = ToPython(s.get(o));
  return d;
}

pyb::list OptionSchema() {
  pyb::list rows;
  PipelineOptions defaults;
  for (const auto& s : PipelineOptionSchema()) {
    pyb::dict r;
    r["name"] = s.name;
    r["type"] = OptionTypeName(s.type);
    r["default"] = s.required ? pyb::object(pyb::none())
                   : s.default_text == "auto" ? pyb::object(pyb::str("auto"))
                                              : ToPython(s.get(defaults));
    r["default_text"] = s.default_text;
    r["doc"] = s.doc;
    r["group"] = s.group;
    r["range"] = s.range_text();
    r["auto"] = s.auto_doc;
    r["choices"] = s.choices;
    r["min"] = std::isfinite(s.min) ? pyb::object(pyb::float_(s.min)) : pyb::object(pyb::none());
    r["max"] = std::isfinite(s.max) ? pyb::object(pyb::float_(s.max)) : pyb::object(pyb::none());
    r["count"] = s.count;
    r["required"] = s.required;
    r["cli"] = s.cli_flag();
    pyb::list aliases;
    for (const auto& a : s.aliases) aliases.append(a.flag);
    r["aliases"] = aliases;
    rows.append(r);
  }
  return rows;
}

}  // namespace stoker::py
