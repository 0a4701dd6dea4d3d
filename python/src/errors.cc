#include "errors.h"

#include <Python.h>

namespace stoker::py {
namespace {

namespace pyb = pybind11;

struct ErrorClasses {
  PyObject* base = nullptr;
  PyObject* by_code[16] = {};
};
ErrorClasses g_classes;  // owned references, alive for the interpreter's lifetime

PyObject* NewClass(pyb::module_& m, const char* name, PyObject* bases, const char* doc) {
  std::string qual = std::string("stoker.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qual.c_str(), doc, bases, nullptr);
  if (cls == nullptr) throw pyb::error_already_set();
  m.attr(name) = pyb::handle(cls);
  return cls;
}

PyObject* Derived(pyb::module_& m, const char* name, PyObject* builtin, const char* doc) {
  PyObject* bases = builtin ? PyTuple_Pack(2, g_classes.base, builtin)
                            : PyTuple_Pack(1, g_classes.base);
  PyObject* cls = NewClass(m, name, bases, doc);
  Py_DECREF(bases);
  return cls;
}

}  // namespace

void RegisterErrors(pyb::module_& m) {
  g_classes.base = NewClass(m, "StokerError", PyExc_Exception,
                            "Base class of every error raised by the stoker core.");
  auto set = [&](StatusCode c, PyObject* cls) { g_classes.by_code[static_cast<int>(c)] = cls; };
  set(StatusCode::kInvalidArgument,
      Derived(m, "InvalidArgumentError", PyExc_ValueError, "A bad argument or option."));
  set(StatusCode::kNotFound,
      Derived(m, "NotFoundError", PyExc_FileNotFoundError, "A file or dataset was not found."));
  set(StatusCode::kIOError, Derived(m, "StokerIOError", PyExc_OSError, "Reading or writing failed."));
  set(StatusCode::kCorrupt,
      Derived(m, "CorruptDataError", nullptr, "Malformed data: bad checksum, truncated file, "
                                              "undecodable image."));
  set(StatusCode::kUnimplemented,
      Derived(m, "UnimplementedError", PyExc_NotImplementedError, "Not supported."));
  set(StatusCode::kCancelled, Derived(m, "CancelledError", nullptr, "The pipeline was stopped."));
  set(StatusCode::kOutOfRange, Derived(m, "EndOfStreamError", PyExc_IndexError, "End of stream."));
  set(StatusCode::kDeadlineExceeded,
      Derived(m, "StallError", PyExc_TimeoutError,
              "Nothing was produced for longer than stall_timeout (a stuck read)."));
  set(StatusCode::kInternal, Derived(m, "InternalError", nullptr, "A bug in stoker."));

  pyb::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      const Status& st = e.status();
      int code = static_cast<int>(st.code());
      PyObject* cls = (code >= 0 && code < 16 && g_classes.by_code[code])
                          ? g_classes.by_code[code]
                          : g_classes.base;
      pyb::gil_scoped_acquire gil;  // translators run with the GIL held; harmless
      PyObject* msg = PyUnicode_FromString(st.message().c_str());
      PyObject* exc = PyObject_CallOneArg(cls, msg);
      Py_XDECREF(msg);
      if (exc == nullptr) return;  // the constructor failed: its error is set
      PyObject* name = PyUnicode_FromString(StatusCodeName(st.code()));
      PyObject_SetAttrString(exc, "code", name);
      Py_XDECREF(name);
      PyErr_SetObject(cls, exc);
      Py_DECREF(exc);
    }
  });
}

}  // namespace stoker::py
