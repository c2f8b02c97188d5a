"""Writes .pt2 archives in the older layouts torch.export.load still accepts,
assembled from torch 2.13's own serializer output (REFERENCE.md section 1):

- ~2.8: <root>/models/model.json with weights and constants as torch.save
  pickles at <root>/data/weights/model.pt and <root>/data/constants/model.pt;
- <= 2.7: no root folder; serialized_exported_program.json,
  serialized_state_dict.pt, serialized_constants.pt, version.
"""

import zipfile

from torch._export.serde.serialize import serialize


def _artifact(ep):
    return serialize(ep)  # JSON + torch.save bytes of the state dict and constants


def save_pickled_weights_layout(ep, path):
    art = _artifact(ep)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("model/archive_format", "pt2")
        z.writestr("model/byteorder", "little")
        z.writestr("model/archive_version", "0")
        z.writestr("model/.data/version", "6\n")
        z.writestr("model/models/model.json", art.exported_program)
        z.writestr("model/data/weights/model.pt", art.state_dict)
        z.writestr("model/data/constants/model.pt", art.constants)
        z.writestr("model/data/sample_inputs/model.pt", art.example_inputs)


def save_root_files_layout(ep, path):
    art = _artifact(ep)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("serialized_exported_program.json", art.exported_program)
        z.writestr("serialized_state_dict.pt", art.state_dict)
        z.writestr("serialized_constants.pt", art.constants)
        z.writestr("serialized_example_inputs.pt", art.example_inputs)
        z.writestr("version", "8.20")
