// Pytree specs (torch.utils._pytree.treespec_dumps) and the ONNX names of the
// leaves they describe: nested inputs and outputs flattened with readable,
// unique names, the same from the Python path and from a .pt2 archive.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "schema/program.h"

namespace pt2onnx::schema {

// Parses a treespec_dumps string ("[1, {\"type\": ..., \"context\": ...,
// \"children_spec\": [...]}]"). Child keys are read from the contexts of
// dicts (OrderedDict, defaultdict, Hugging Face ModelOutput and other
// mappings registered with their key list) and dataclasses; other nodes
// (tuples, lists, namedtuples) are positional. `source` names the input in
// error messages.
TreeSpec parse_treespec(std::string_view json, const std::string& source);

// The path of every leaf, in flattening order: one string per level, the
// child's key or its position ("0", "1", ...).
std::vector<std::vector<std::string>> leaf_paths(const TreeSpec& spec);

// Names of the input leaves of `in_spec` (the tree of (args, kwargs)): the
// forward argument (arg_names[i] for args[i], the key for a kwarg) followed by
// the path inside it, joined with '.': `past` = ((k0, v0), ...) gives
// past.0.0, past.0.1, ...; a dict {"key": t} given as `cache` gives cache.key;
// a transformers DynamicCache (as transformers' export registration flattens
// it) gives past_key_values.0.key, past_key_values.0.value, ... as Hugging
// Face's ONNX tooling names them, an EncoderDecoderCache (as pt2onnx.hf
// registers it) past_key_values.0.decoder.key, ..., past_key_values.0.encoder.key.
std::vector<std::string> input_leaf_names(const TreeSpec& in_spec,
                                          const std::vector<std::string>& arg_names);

// Names of the output leaves of `out_spec`. fx_names[i] is the FX value of
// leaf i. A single tensor and the direct elements of a returned tuple / list
// keep their FX names; elements nested deeper in a tuple are output_<i>.<path>;
// a returned dict (or ModelOutput, dataclass) names its leaves by key, nested
// paths joined with '.': logits, past_key_values.0.0. A DynamicCache returned
// as `past_key_values` (the updated cache) is named present.0.key, ...; an
// EncoderDecoderCache present.0.decoder.key, ..., present.0.encoder.key, ....
std::vector<std::string> output_leaf_names(const TreeSpec& out_spec,
                                           const std::vector<std::string>& fx_names);

// Makes names unique in order: a repeat of an earlier name gets _1, _2, ...
void make_unique(std::vector<std::string>& names);

}  // namespace pt2onnx::schema
