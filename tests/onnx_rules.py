"""The rules every file pt2onnx writes is held to in the tests (issue 34),
written here independently of the C++ check (src/ir/check_structure.cpp) so a
bug in one is caught by the other:

- structure: node names unique within each graph and function body; every
  value assigned once (graph inputs, initializers, node outputs; a nested
  graph does not redefine an enclosing scope's value); every node input
  defined before the node (or in an enclosing scope before the node that
  holds the nested graph); graph outputs defined; an opset import for every
  domain used, in the model and in each function; functions' attribute
  references declared;
- operator schemas: standard-ONNX files pass onnx.checker.check_model with
  full_check (schemas, types, shape inference). Files for
  target="onnxruntime" hold com.microsoft contrib ops and the default-domain
  SimplifiedLayerNormalization, which onnx's checker does not know: each of
  their nodes is held to onnxruntime's own schema of that op at the imported
  version (known op, known attributes, required attributes present, input and
  output counts in range), the same lookup that refuses a Shape with `start`
  at opset 14 when onnxruntime loads the file.

check_model_file(path_or_bytes, target) raises AssertionError naming the rule
and the node."""

from __future__ import annotations

import functools

import onnx


class RuleError(AssertionError):
    pass


def _domain(d: str) -> str:
    return "" if d in ("", "ai.onnx") else d


def _imports(entries) -> dict:
    return {_domain(o.domain): o.version for o in entries}


def _where(graph: str, node=None) -> str:
    if node is None:
        return f"graph '{graph}'"
    return f"graph '{graph}', node '{node.name}' ({node.domain + '::' if node.domain else ''}" \
           f"{node.op_type})"


def _walk(graph, scopes, used_domains, where_prefix, in_function_attrs=None, node_names=None):
    """Checks one graph (or function body, given as a GraphProto-like with
    node/input/output/initializer) in the open scopes; collects used domains."""
    scope = set()
    scopes.append(scope)
    names = set()
    label = where_prefix + (graph.name if hasattr(graph, "name") else "")

    def visible(v):
        return any(v in s for s in scopes)

    def define(v, node, what):
        if not v:
            return
        if visible(v):
            raise RuleError(f"{_where(label, node)}: value '{v}' assigned twice ({what})")
        scope.add(v)

    for i in graph.input:
        define(i if isinstance(i, str) else i.name, None, "input")
    inputs = {i if isinstance(i, str) else i.name for i in graph.input}
    for init in getattr(graph, "initializer", []):
        if init.name in inputs:
            continue  # an initializer listed as an input too (its default; IR >= 4 allows it)
        define(init.name, None, "initializer")
    for n in graph.node:
        if n.name:
            if n.name in names:
                raise RuleError(f"{_where(label, n)}: two nodes named '{n.name}'")
            names.add(n.name)
        for v in n.input:
            if v and not visible(v):
                raise RuleError(f"{_where(label, n)}: input '{v}' not defined before the node")
        used_domains.setdefault(_domain(n.domain), n)
        for a in n.attribute:
            if a.ref_attr_name:
                if in_function_attrs is None:
                    raise RuleError(f"{_where(label, n)}: attribute reference outside a function")
                if a.ref_attr_name not in in_function_attrs:
                    raise RuleError(f"{_where(label, n)}: attribute '{a.name}' refers to "
                                    f"undeclared '{a.ref_attr_name}'")
            subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else \
                list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []
            for s in subs:
                _walk(s, scopes, used_domains, label + "/", in_function_attrs)
        for v in n.output:
            define(v, n, "node output")
    for o in graph.output:
        v = o if isinstance(o, str) else o.name
        if not visible(v):
            raise RuleError(f"{_where(label)}: output '{v}' is not defined")
    scopes.pop()


def check_structure(model: onnx.ModelProto, defined=()) -> None:
    """`defined`: names the session is given apart from the file (initializers
    handed over in memory)."""
    imports = _imports(model.opset_import)
    if "" not in imports:
        raise RuleError("the model imports no default-domain opset")
    used: dict = {}
    in_file = {i.name for i in model.graph.initializer}
    _walk(model.graph, [set(defined) - in_file], used, "")
    for d, n in used.items():
        if d not in imports:
            raise RuleError(f"{_where(model.graph.name, n)}: domain '{d}' used but not imported")
    seen = set()
    for f in model.functions:
        key = (f.domain, f.name)
        if key in seen:
            raise RuleError(f"function {f.domain}.{f.name} defined twice")
        seen.add(key)
        if _domain(f.domain) not in imports:
            raise RuleError(f"function {f.domain}.{f.name}: its domain is not imported by the model")
        f_imports = _imports(f.opset_import)
        f_used: dict = {}
        attrs = set(f.attribute) | {a.name for a in f.attribute_proto}
        _walk(f, [], f_used, f"function {f.domain}.{f.name}", attrs)
        for d, n in f_used.items():
            if d not in f_imports:
                raise RuleError(f"function {f.domain}.{f.name}, node '{n.name}' ({n.op_type}): "
                                f"domain '{d or 'ai.onnx'}' used but the function does not "
                                f"import it")
        for d, v in f_imports.items():
            if d in imports and imports[d] != v:
                raise RuleError(f"function {f.domain}.{f.name} imports '{d or 'ai.onnx'}' at "
                                f"version {v}, the model at {imports[d]}")


@functools.lru_cache(maxsize=1)
def _ort_schemas() -> dict:
    """onnxruntime's operator schemas: (domain, op) -> [(since_version, schema)]."""
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    table: dict = {}
    for s in C.get_all_operator_schema():
        table.setdefault((_domain(s.domain), s.name), []).append((s.since_version, s))
    for v in table.values():
        v.sort(key=lambda e: e[0])
    return table


def _ort_schema(domain: str, op: str, version: int):
    best = None
    for since, s in _ort_schemas().get((domain, op), []):
        if since <= version:
            best = s
    return best


def check_ort_schemas(model: onnx.ModelProto) -> None:
    """Every node of every graph and function body against onnxruntime's
    schema of its op at the imported version (calls of model-local functions
    aside)."""
    local = {(_domain(f.domain), f.name) for f in model.functions}

    def nodes(graph_nodes, imports, label):
        for n in graph_nodes:
            d = _domain(n.domain)
            for a in n.attribute:
                subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else \
                    list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []
                for s in subs:
                    nodes(s.node, imports, label + "/" + s.name)
            if (d, n.op_type) in local:
                continue
            version = imports.get(d)
            s = _ort_schema(d, n.op_type, version if version is not None else 0)
            if s is None:
                raise RuleError(f"{_where(label, n)}: onnxruntime has no schema for "
                                f"{d or 'ai.onnx'}::{n.op_type} at version {version}")
            known = s.attributes
            for a in n.attribute:
                if a.name not in known:
                    raise RuleError(f"{_where(label, n)}: attribute '{a.name}' is not in "
                                    f"{n.op_type}'s schema at version {version} (since "
                                    f"{s.since_version})")
            for name, attr in known.items():
                if attr.required and name not in {a.name for a in n.attribute}:
                    raise RuleError(f"{_where(label, n)}: required attribute '{name}' missing")
            n_in = len(n.input)
            if n_in < s.min_input or n_in > s.max_input:
                raise RuleError(f"{_where(label, n)}: {n_in} inputs, the schema takes "
                                f"{s.min_input}..{s.max_input}")
            n_out = len(n.output)
            if n_out < s.min_output or n_out > s.max_output:
                raise RuleError(f"{_where(label, n)}: {n_out} outputs, the schema gives "
                                f"{s.min_output}..{s.max_output}")

    nodes(model.graph.node, _imports(model.opset_import), model.graph.name)
    for f in model.functions:
        nodes(f.node, _imports(f.opset_import), f"function {f.domain}.{f.name}")


def check_model_file(model, target: str = "standard", *, full_check: bool = True,
                     memory_initializers=()) -> None:
    """`model`: a path or the serialized bytes. Structure always; then
    onnx.checker (standard target) or onnxruntime's schemas (onnxruntime
    target). `memory_initializers`: names of initializers handed to the
    session from memory (in-memory exports by reference): defined for the
    structure; onnx.checker, which needs every initializer in the proto,
    gives way to onnxruntime's schemas for such a model."""
    path = None
    if isinstance(model, (bytes, bytearray)):
        proto = onnx.load_model_from_string(bytes(model))
    else:
        path = model
        proto = onnx.load(model, load_external_data=False)
    check_structure(proto, memory_initializers)
    if target == "onnxruntime" or memory_initializers:
        check_ort_schemas(proto)
        return
    # By path: external data is checked to exist beside the model.
    onnx.checker.check_model(path if path is not None else proto, full_check=full_check)
