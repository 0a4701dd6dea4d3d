// stoker._stoker.diagnose_steps: the doctor's per-step rules (src/doctor, DiagnoseSteps)
// for stoker.watch, so the Python meter and `stoker doctor` give the same verdict in the
// same words.
#pragma once

#include <pybind11/pybind11.h>

namespace stoker::py {

void RegisterDoctor(pybind11::module_& m);

}  // namespace stoker::py
