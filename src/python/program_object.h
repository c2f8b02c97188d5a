// The Python API's hand-off of a captured program to the C++ core without
// JSON: torch's serializer still decides what the program says (its
// dataclass tree, torch._export.serde.schema.ExportedProgram), but instead of
// turning that tree into JSON text in Python and parsing it back here, the
// shared reader (schema/reader_impl.h) walks the Python objects directly.
#pragma once
#include <Python.h>

#include <string>

#include "schema/program.h"

namespace pt2onnx {

// Reads `root` (an ExportedProgram dataclass of torch's serde schema). Needs
// the GIL. Throws pt2onnx::Error naming the path of anything malformed, as
// the JSON reader does.
schema::Program read_program_object(PyObject* root, const std::string& source);

}  // namespace pt2onnx
