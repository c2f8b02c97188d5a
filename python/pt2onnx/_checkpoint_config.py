"""A checkpoint's config.json checked against its weights before a model is built from it.

transformers builds whatever config.json describes: `num_hidden_layers: 1000000` over a
2-layer checkpoint builds layers for minutes before anything compares them with the weights.
Here the layer counts, the hidden size and the vocabulary that config.json states are compared
with what the tensors' names and shapes imply, read from the safetensors headers alone (by the
C++ core, which validates them; no tensor data is read), and a field that clearly disagrees is
refused in one line naming it. No torch here.

What is compared (generic, not per architecture):

- Layer counts: the fields `LAYER_FIELDS` (at the top of config.json and in its sub-configs:
  text_config, encoder, decoder, ...) against the layer families of the weights' names: the
  distinct integers after a `layers`, `layer`, `h`, `blocks` or `block` component, or one
  ending in `_layers` or `_blocks` (`model.layers.N.`, `transformer.h.N.`, `encoder.block.N.`,
  diffusers' `transformer_blocks.N.`); a family of lists (`blocks.N.M.`) also counts its
  (N, M) pairs. A field that names more layers than the family it describes holds is refused.
  An encoder's or decoder's field (by its name or its sub-config's) is compared with the
  families of that side (none: not compared, as T5EncoderModel's num_decoder_layers); any
  other with the largest family. Fewer layers than the weights hold pass (a truncated config,
  multi-token-prediction layers), as does a checkpoint with no layer family (ALBERT's shared
  layers, convolutional models).
- Vocabulary and hidden size: `vocab_size` and the hidden size (`HIDDEN_FIELDS`) of the top
  level (else of text_config) against the token embedding, a float 2-D tensor named
  `...embed_tokens.weight`, `wte`, `word_embeddings`, `shared`, `embed_in`, `tok_embeddings`,
  `token_embedding` or `embeddings`: when one embedding has the config's vocabulary rows but
  a width none of the level's hidden or embedding sizes states, the hidden size is refused;
  when one has a stated width but fewer rows than vocab_size, the vocabulary is. An embedding
  that fits both (more rows than vocab_size included: tokens beside the vocabulary, as
  MLlama's), or none that fits either (another part's embedding), passes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from typing import Any

from ._checkpoint_files import read_regular_file, safetensors_files

LAYER_FIELDS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers",
                "decoder_layers", "num_encoder_layers", "num_decoder_layers")
HIDDEN_FIELDS = ("hidden_size", "n_embd", "d_model", "dim")
_LIST_NAMES = frozenset(("layers", "layer", "h", "blocks", "block"))
_EMBEDDINGS = frozenset(("embed_tokens", "wte", "word_embeddings", "shared", "embed_in",
                         "tok_embeddings", "token_embedding", "embeddings"))
_FLOATS = frozenset(("float32", "float16", "bfloat16", "float64"))
_MAX_DEPTH = 4  # sub-configs inside sub-configs


def read_config(path: str | os.PathLike) -> dict[str, Any]:
    """Read a checkpoint directory's config.json, checked to be a regular file of sane size.

    Args:
        path: The checkpoint directory.

    Returns:
        dict: The parsed config.json.

    Raises:
        FileNotFoundError: `path` holds no config.json.
        ValueError: config.json is not a regular file (a FIFO, a device), is larger than
            `MAX_JSON_BYTES` (64 MiB), cannot be opened, or is not a JSON object.
    """
    path = os.fspath(path)
    name = os.path.join(path, "config.json")
    try:
        data = read_regular_file(name)
    except (FileNotFoundError, NotADirectoryError):
        raise FileNotFoundError(f"{path}: not a checkpoint directory (no config.json; "
                                "save one with model.save_pretrained(path))") from None
    except OSError as e:
        raise ValueError(f"{name}: cannot be opened ({e.strerror})") from None
    try:
        config = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{name}: not JSON ({str(e).splitlines()[0]})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{name}: not a JSON object")
    return config


def weight_shapes(path: str | os.PathLike) -> dict[str, tuple[str, list[int]]] | None:
    """name -> (dtype, shape) of a checkpoint directory's safetensors tensors (headers only,
    validated by the C++ core); None when it has no safetensors file (a pytorch_model.bin
    checkpoint, loaded with weights="memory")."""
    from . import _core

    try:
        files = safetensors_files(path)
    except FileNotFoundError:
        return None
    return _core.safetensors_shapes(files)


def check(path: str | os.PathLike, config: dict[str, Any],
          shapes: dict[str, tuple[str, list[int]]] | None = None) -> None:
    """Check a config.json against the weights of its checkpoint (see the module's docstring).

    Args:
        path: The checkpoint directory (for the message; its weights are read when `shapes`
            is None).
        config: config.json, parsed (`read_config`).
        shapes: The tensors' dtypes and shapes (`weight_shapes`); None: read here.

    Raises:
        ValueError: A field disagrees with the weights: one line naming it, its value in
            config.json and what the weights hold.
        pt2onnx.ConversionError: A safetensors file is not a regular file or its header is
            malformed.
    """
    if shapes is None:
        shapes = weight_shapes(path)
    if not shapes:
        return
    where = os.path.join(os.fspath(path), "config.json")
    families = _layer_families(shapes)
    for key_path, level in _levels(config):
        _check_layers(where, key_path, level, families)
    _check_embedding(where, config, shapes)


def _levels(config: dict[str, Any], key_path: str = "", depth: int = 0):
    """(dotted key path, dict) of config.json's top level and its sub-configs."""
    yield key_path, config
    if depth >= _MAX_DEPTH:
        return
    for k, v in config.items():
        if isinstance(v, dict):
            yield from _levels(v, f"{key_path}{k}.", depth + 1)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


class _Family:
    """The tensors under `prefix.N.` (N an integer, prefix ending in a list name)."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.indices: set[int] = set()
        self.pairs: set[tuple[int, int]] = set()  # prefix.N.M.: a list of lists

    def count(self) -> int:
        return max(len(self.indices), len(self.pairs))

    def describe(self) -> str:
        if len(self.pairs) > len(self.indices):
            return f"{len(self.pairs)} layers ({self.prefix}.N.M, {len(self.indices)} N)"
        lo, hi = min(self.indices), max(self.indices)
        return f"{len(self.indices)} layers ({self.prefix}.{lo} .. {self.prefix}.{hi})"


_INDEX = re.compile(r"\d{1,9}")


def _layer_families(shapes) -> list[_Family]:
    families: dict[str, _Family] = {}
    for name in shapes:
        parts = name.split(".")
        for i in range(1, len(parts) - 1):
            if _INDEX.fullmatch(parts[i]):
                if parts[i - 1] in _LIST_NAMES or parts[i - 1].endswith(("_layers", "_blocks")):
                    prefix = ".".join(parts[:i])
                    fam = families.get(prefix) or families.setdefault(prefix, _Family(prefix))
                    n = int(parts[i])
                    fam.indices.add(n)
                    if i + 2 < len(parts) and _INDEX.fullmatch(parts[i + 1]):
                        fam.pairs.add((n, int(parts[i + 1])))
                break  # the first index only: later ones are inside a layer (experts.N)
    return list(families.values())


def _side(name: str) -> str | None:
    for side in ("encoder", "decoder"):
        if side in name:
            return side
    return None


def _check_layers(where, key_path, level, families) -> None:
    if not families:
        return
    level_side = _side(key_path)
    for key in LAYER_FIELDS:
        n = _int(level.get(key))
        if n is None or n <= 0:
            continue
        side = _side(key) or level_side
        fams = families
        if side is not None:
            fams = [f for f in families if any(side in p for p in f.prefix.split("."))]
            if not fams:  # no weights of that side (T5EncoderModel's num_decoder_layers)
                continue
        best = max(fams, key=_Family.count)
        if n > best.count():
            raise ValueError(f"{where}: {key_path}{key} is {n}, but the checkpoint's weights "
                             f"hold {best.describe()}: config.json does not fit the checkpoint")


def _embeddings(shapes) -> list[tuple[str, list[int]]]:
    out = []
    for name, (dtype, shape) in shapes.items():
        parts = name.split(".")
        if (len(parts) >= 2 and parts[-1] == "weight" and parts[-2] in _EMBEDDINGS
                and dtype in _FLOATS and len(shape) == 2):
            out.append((name, list(shape)))
    return sorted(out)


def _widths(level: dict[str, Any]) -> set[int]:
    """The widths a level's token embedding may have: its hidden sizes and any embedding size
    it states (ALBERT's embedding_size, OPT's word_embed_proj_dim)."""
    out = set()
    for k, v in level.items():
        v = _int(v)
        if v is None:
            continue
        if k in HIDDEN_FIELDS or (("embed" in k or "embd" in k)
                                  and not any(w in k for w in ("position", "vocab", "max"))):
            out.add(v)
    return out


def _check_embedding(where, config, shapes) -> None:
    embeddings = _embeddings(shapes)
    if not embeddings:
        return
    level, key_path = config, ""
    if _int(config.get("vocab_size")) is None and isinstance(config.get("text_config"), dict):
        level, key_path = config["text_config"], "text_config."
    vocab = _int(level.get("vocab_size"))
    hidden_key = next((k for k in HIDDEN_FIELDS if _int(level.get(k)) is not None), None)
    if vocab is None or vocab <= 0 or hidden_key is None:
        return
    hidden = level[hidden_key]
    widths = _widths(level)
    # More rows than vocab_size fit: tokens beside the vocabulary (MLlama's 8 image tokens
    # in a text_config of vocab_size 128256), a padded vocabulary.
    if any(rows >= vocab and cols in widths for _, (rows, cols) in embeddings):
        return
    for name, (rows, cols) in embeddings:
        if rows == vocab:
            raise ValueError(f"{where}: {key_path}{hidden_key} is {hidden}, but the checkpoint's "
                             f"token embedding {name} is [{rows}, {cols}] (hidden size {cols}): "
                             "config.json does not fit the checkpoint")
    for name, (rows, cols) in embeddings:
        if cols in widths:  # and fewer rows than vocab_size: tokens without an embedding
            raise ValueError(f"{where}: {key_path}vocab_size is {vocab}, but the checkpoint's "
                             f"token embedding {name} is [{rows}, {cols}] (a vocabulary of "
                             f"{rows}): config.json does not fit the checkpoint")


# ---- allocation failures while the model is built ------------------------------------------

_ALLOCATION = ("can't allocate", "cannot allocate", "not enough memory", "out of memory",
               "DefaultCPUAllocator", "Storage size calculation overflowed")


def sizing_fields(config: dict[str, Any], limit: int = 4) -> str:
    """The largest integer sizes config.json states (`name=value`, largest first): what sizes
    the model built from it."""
    sizes = []
    for key_path, level in _levels(config):
        for k, v in level.items():
            v = _int(v)
            if v is None or v < 2 or k.endswith(("_id", "_ids", "_token", "_index")):
                continue
            sizes.append((v, f"{key_path}{k}"))
    sizes.sort(key=lambda t: (-t[0], t[1]))
    return ", ".join(f"{k}={v}" for v, k in sizes[:limit])


@contextlib.contextmanager
def allocation_errors(path: str | os.PathLike, config: Any):
    """Turn an allocation failure while a model is built from config.json (MemoryError, torch's
    "can't allocate memory") into one line naming the fields that size the model.

    Args:
        path: The checkpoint directory (for the message).
        config: config.json, parsed, or a transformers config (its `to_dict()` is read only
            on a failure).
    """
    try:
        yield
    except (MemoryError, RuntimeError) as e:
        text = str(e)
        if not isinstance(e, MemoryError) and not any(a in text for a in _ALLOCATION):
            raise
        if not isinstance(config, dict):
            config = config.to_dict()
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(e).__name__)
        raise MemoryError(
            f"{os.path.join(os.fspath(path), 'config.json')}: building the model it describes "
            f"ran out of memory ({first[:200]}); its largest sizes: {sizing_fields(config)}"
        ) from None
