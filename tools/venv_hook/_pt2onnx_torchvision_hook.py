"""Start-up hook of pt2onnx's development environments (.venv, made by `make`, and the torch
release environments of tools/torch_venv.sh); installed there only, never into another
interpreter, by tools/venv_hook/install.sh.

PyPI's torchvision wheels are CUDA builds: with the CPU torch these environments pin, their
compiled operators (torchvision._C: nms, roi_align, ...) do not load, and `import torchvision`
then fails in torchvision._meta_registrations ("operator torchvision::nms does not exist"), and
with it every transformers model that imports torchvision (`from transformers import
LlamaConfig`). This finder steps in only at that module, and only when the compiled operators
did not load: it gives an empty module instead, so torchvision's Python side (the model
definitions, transforms) imports, and calling a compiled operator still raises torchvision's
own "Couldn't load custom C++ ops". Where the operators load (a CPU build of torchvision), it
does nothing. Cost at start-up: one entry on sys.meta_path, nothing imported (the finder and
loader are duck-typed: subclassing importlib.abc's classes imported importlib.abc, and through
it importlib.resources, in every process of the environment: 26 ms with a cold page cache)."""

import sys

_NAME = "torchvision._meta_registrations"


class _EmptyModule:
    def create_module(self, spec):
        return None  # the default module object

    def exec_module(self, module):
        module.__doc__ = ("Left empty by pt2onnx's environment hook (_pt2onnx_torchvision_hook): "
                          "torchvision's compiled operators do not load with this torch.")


class TorchvisionOpsFinder:
    def find_spec(self, name, path=None, target=None):
        if name != _NAME:
            return None
        try:
            from torchvision.extension import _has_ops
        except Exception:  # an unknown torchvision layout: leave the import to it
            return None
        if _has_ops():
            return None
        from importlib.machinery import ModuleSpec  # only here: a torchvision import is under way

        return ModuleSpec(name, _EmptyModule())


if not any(isinstance(f, TorchvisionOpsFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, TorchvisionOpsFinder())
