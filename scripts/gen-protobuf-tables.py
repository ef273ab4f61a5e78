#!/usr/bin/env python3
"""Generates src/model/protobuf/tables.rs from the Go API types of Kubernetes.

The Go structs of k8s.io/api and k8s.io/apimachinery are the single source of both wire formats:
each field's `protobuf:"<wire>,<number>,<opt|rep>,name=..."` tag gives its protobuf number, and its
`json:"name,omitempty,omitzero"` tag and Go type (pointer or value, slice, map, named type) give what
encoding/json writes for it. This script reads those tags (no Go toolchain needed) and writes one
static table per message for the transcoder in src/model/protobuf/json.rs.

Usage (sources from `git archive` of the tags that match the test vectors, or `go mod download`):
    scripts/gen-protobuf-tables.py API_DIR APIMACHINERY_DIR AGGREGATOR_DIR APIEXTENSIONS_DIR \
        > src/model/protobuf/tables.rs
where API_DIR is k8s.io/api, APIMACHINERY_DIR k8s.io/apimachinery, AGGREGATOR_DIR
k8s.io/kube-aggregator (APIService) and APIEXTENSIONS_DIR k8s.io/apiextensions-apiserver
(CustomResourceDefinition), all at v0.35.7.

apiextensions' JSONSchemaProps brings types whose JSON is not their struct's: `JSON` (raw JSON,
as RawExtension), and three either-or wrappers (`JSONSchemaPropsOrArray`, `...OrBool`,
`...OrStringArray`) whose JSON is one of their fields; they become kinds of their own.

Besides every kind of the stable group versions below, one kind of a beta version is generated:
storage.k8s.io/v1beta1 VolumeAttributesClass, which kube-apiserver 1.35 still stores (its v1 is the
same message; src/model/protobuf/stored.rs reads one as the other).
"""
import os
import re
import sys

API, AM, AGG, APIEXT = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]

# Go import path -> directory.
PACKAGES = {
    "k8s.io/apimachinery/pkg/apis/meta/v1": os.path.join(AM, "pkg/apis/meta/v1"),
}
GROUP_VERSIONS = [
    "core/v1", "apps/v1", "batch/v1", "discovery/v1", "coordination/v1", "events/v1",
    "networking/v1", "rbac/v1", "policy/v1", "storage/v1", "scheduling/v1", "node/v1",
    "autoscaling/v1", "autoscaling/v2", "admissionregistration/v1",
    "flowcontrol/v1", "certificates/v1", "resource/v1",
]
for gv in GROUP_VERSIONS:
    PACKAGES["k8s.io/api/" + gv] = os.path.join(API, gv)
AGGREGATOR = "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
PACKAGES[AGGREGATOR] = os.path.join(AGG, "pkg/apis/apiregistration/v1")
APIEXTENSIONS = "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
PACKAGES[APIEXTENSIONS] = os.path.join(APIEXT, "pkg/apis/apiextensions/v1")
PACKAGES["k8s.io/api/storage/v1beta1"] = os.path.join(API, "storage/v1beta1")
# Kinds of other versions that kube-apiserver stores: (package, kind).
EXTRA_KINDS = [("k8s.io/api/storage/v1beta1", "VolumeAttributesClass")]

# Types whose JSON is not their struct's: (import path, name) -> kind in the table.
SPECIAL = {
    ("k8s.io/apimachinery/pkg/apis/meta/v1", "Time"): "Time",
    ("k8s.io/apimachinery/pkg/apis/meta/v1", "MicroTime"): "MicroTime",
    ("k8s.io/apimachinery/pkg/apis/meta/v1", "Duration"): "Duration",
    ("k8s.io/apimachinery/pkg/apis/meta/v1", "FieldsV1"): "Raw",
    ("k8s.io/apimachinery/pkg/api/resource", "Quantity"): "Quantity",
    ("k8s.io/apimachinery/pkg/util/intstr", "IntOrString"): "IntOrString",
    ("k8s.io/apimachinery/pkg/runtime", "RawExtension"): "Raw",
    (APIEXTENSIONS, "JSON"): "Raw",
}
# The either-or wrappers of JSONSchemaProps: kind name, with the index of JSONSchemaProps.
EITHER = {
    (APIEXTENSIONS, "JSONSchemaPropsOrArray"): "OrArray",
    (APIEXTENSIONS, "JSONSchemaPropsOrBool"): "OrBool",
    (APIEXTENSIONS, "JSONSchemaPropsOrStringArray"): "OrStrings",
}
SCALARS = {
    "string": "Str", "bool": "Bool", "int32": "I32", "int64": "I64", "int": "I64",
    "uint32": "U32", "uint64": "U64", "float64": "F64", "[]byte": "Bytes", "byte": None,
}


def strip_comments(src):
    src = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
    out = []
    for line in src.splitlines():
        inq = False
        for i, c in enumerate(line):
            if c in "`\"":
                inq = not inq
            elif not inq and line.startswith("//", i):
                line = line[:i]
                break
        out.append(line)
    return "\n".join(out)


class Pkg:
    def __init__(self, path, d):
        self.path = path
        self.imports = {}
        self.structs = {}  # name -> body text
        self.named = {}    # name -> underlying type text
        self.group = None
        for f in sorted(os.listdir(d)):
            if not f.endswith(".go") or f.endswith("_test.go") or f.startswith("zz_") or f.startswith("generated"):
                continue
            src = strip_comments(open(os.path.join(d, f)).read())
            for m in re.finditer(r'^\s*(\w+\s+)?"([^"]+)"\s*$', src, flags=re.M):
                alias = (m.group(1) or "").strip() or m.group(2).rsplit("/", 1)[-1]
                self.imports[alias] = m.group(2)
            m = re.search(r'GroupName\s*=\s*"([^"]*)"', src)
            if m:
                self.group = m.group(1)
            for m in re.finditer(r"^type (\w+) struct\s*\{", src, flags=re.M):
                i = m.end()
                depth = 1
                j = i
                while depth:
                    c = src[j]
                    if c == "{":
                        depth += 1
                    elif c == "}":
                        depth -= 1
                    elif c == "`":
                        j = src.index("`", j + 1)
                    j += 1
                self.structs[m.group(1)] = src[i:j - 1]
            for m in re.finditer(r"^type (\w+) ([\w.\[\]*]+)\s*$", src, flags=re.M):
                self.named[m.group(1)] = m.group(2)
            for m in re.finditer(r"^type \(\n(.*?)^\)", src, flags=re.M | re.S):
                for l in m.group(1).splitlines():
                    mm = re.match(r"\s*(\w+) ([\w.\[\]*]+)\s*$", l)
                    if mm and mm.group(2) != "struct":
                        self.named[mm.group(1)] = mm.group(2)


pkgs = {p: Pkg(p, d) for p, d in PACKAGES.items()}
messages = {}  # (pkg, name) -> index
order = []
fields_of = {}


def resolve(pkg, t):
    """(import path, name) of a type reference, or (None, t) for builtins."""
    if "." in t:
        alias, name = t.split(".", 1)
        return pkg.imports[alias], name
    if t in SCALARS:
        return None, t
    return pkg.path, t


def kind_of(pkg, t, where):
    """The table kind of a non-pointer, non-slice, non-map Go type."""
    path, name = resolve(pkg, t)
    if path is None:
        k = SCALARS[name]
        if k is None:
            raise SystemExit(f"{where}: unsupported type {t}")
        return k
    if (path, name) in SPECIAL:
        return SPECIAL[(path, name)]
    if (path, name) in EITHER:
        return f"{EITHER[(path, name)]}({message(APIEXTENSIONS, 'JSONSchemaProps')})"
    if path == "k8s.io/apimachinery/pkg/types" and name in ("UID", "NodeName", "NamespacedName"):
        return "Str"
    if path not in pkgs:
        raise SystemExit(f"{where}: type {t} from unknown package {path}")
    p = pkgs[path]
    if name in p.structs:
        return f"Msg({message(path, name)})"
    if name in p.named:
        u = p.named[name]
        # A named []string as a map value: protobuf wraps it in a message {repeated string
        # items = 1} (certificates' ExtraValue); JSON is the bare list.
        if u == "[]string":
            return "StrList"
        if u.startswith("[]") and u != "[]byte" or u.startswith("map["):
            raise SystemExit(f"{where}: named collection {t} = {u} (needs a wrapper message)")
        return kind_of(p, u, where)
    raise SystemExit(f"{where}: unknown type {t}")


def message(path, name):
    key = (path, name)
    if key in messages:
        return messages[key]
    messages[key] = len(order)
    order.append(key)
    fields_of[key] = parse_fields(pkgs[path], name)
    return messages[key]


TAG = re.compile(r"`([^`]*)`")


def parse_fields(pkg, name):
    out = []
    for line in pkg.structs[name].splitlines():
        line = line.strip()
        if not line:
            continue
        m = TAG.search(line)
        if not m:
            continue
        tags = dict(re.findall(r'(\w+):"([^"]*)"', m.group(1)))
        decl = line[: m.start()].split()
        if "protobuf" not in tags or tags["protobuf"] == "-":
            continue
        pb = tags["protobuf"].split(",")
        num = int(pb[1])
        js = tags.get("json", "").split(",")
        if js[0] == "-":
            continue
        if not decl:
            raise SystemExit(f"{pkg.path}.{name}: cannot parse {line!r}")
        if len(decl) == 1:
            gotype = decl[0]
            fname = gotype.lstrip("*").split(".")[-1]
        else:
            fname, gotype = decl[0], decl[1]
        where = f"{pkg.path}.{name}.{fname}"
        inline = "inline" in js[1:] or (len(decl) == 1 and js[0] == "")
        omit = "Zero" if "omitzero" in js[1:] else ("Empty" if "omitempty" in js[1:] else "Never")
        t = gotype
        card = "One"
        if t.startswith("*"):
            card = "Ptr"
            t = t[1:]
        if t.startswith("[]") and t != "[]byte":
            card = "Rep"
            t = t[2:]
            if t.startswith("*"):
                t = t[1:]
            kind = kind_of(pkg, t, where)
        elif t.startswith("map["):
            mk, mv = re.match(r"map\[([\w.]+)\](.+)", t).groups()
            kk = kind_of(pkg, mk, where)
            if mv.startswith("[]") and mv != "[]byte":
                raise SystemExit(f"{where}: map of slices {t}")
            vk = kind_of(pkg, mv, where)
            card = f"Map({kk_to_key(kk, where)})"
            kind = vk
        else:
            # A named slice or map type used as a field.
            path, tn = resolve(pkg, t)
            if path in pkgs and tn in pkgs[path].named and tn not in pkgs[path].structs:
                u = pkgs[path].named[tn]
                if u.startswith("map["):
                    mk, mv = re.match(r"map\[([\w.]+)\](.+)", u).groups()
                    kk = kind_of(pkgs[path], mk, where)
                    kind = kind_of(pkgs[path], mv, where)
                    card = f"Map({kk_to_key(kk, where)})"
                    out.append((num, "" if inline else js[0], kind, card, omit))
                    continue
                if u.startswith("[]") and u != "[]byte":
                    kind = kind_of(pkgs[path], u[2:], where)
                    card = "Rep"
                    out.append((num, "" if inline else js[0], kind, card, omit))
                    continue
            kind = kind_of(pkg, t, where)
        if inline and not kind.startswith("Msg("):
            raise SystemExit(f"{where}: inline non-struct")
        out.append((num, "" if inline else js[0], kind, card, omit))
    return out


def kk_to_key(kk, where):
    if kk != "Str":
        raise SystemExit(f"{where}: map key kind {kk}")
    return "Key::Str"


# Top-level kinds: structs with TypeMeta embedded and an ObjectMeta `metadata` (lists excluded).
def api_version_of(path):
    p = pkgs[path]
    version = path.rsplit("/", 1)[1]
    return version if p.group == "" else f"{p.group}/{version}"


kinds = []
for path in ["k8s.io/api/" + gv for gv in GROUP_VERSIONS] + [AGGREGATOR, APIEXTENSIONS]:
    p = pkgs[path]
    api_version = api_version_of(path)
    for name, body in sorted(p.structs.items()):
        if re.search(r"^\s*metav1\.TypeMeta\b", body, flags=re.M) and re.search(
            r"^\s*metav1\.ObjectMeta\b", body, flags=re.M
        ) and not name.endswith("List"):
            try:
                kinds.append((api_version, name, message(path, name)))
            except SystemExit as e:
                print(f"skipping {api_version} {name}: {e}", file=sys.stderr)
                raise

for path, name in EXTRA_KINDS:
    kinds.append((api_version_of(path), name, message(path, name)))

print("// @generated by scripts/gen-protobuf-tables.py from k8s.io/api, k8s.io/apimachinery,")
print("// k8s.io/kube-aggregator and k8s.io/apiextensions-apiserver v0.35.7 (Kubernetes 1.35.7).")
print("// Do not edit; rerun the script.")
print("#![allow(clippy::all)]")
print("use super::schema::{Card::*, Field, Key, Kind::*, Message, Omit::*};")
print()
print(f"/// Every message reachable from a served kind, by index.")
print(f"pub(crate) static MESSAGES: [Message; {len(order)}] = [")
for (path, name) in order:
    fs = fields_of[(path, name)]
    by_num = [0] * (max([f[0] for f in fs], default=0) + 1)
    for i, f in enumerate(fs):
        by_num[f[0]] = i + 1
    assert len(fs) < 255
    short = {AGGREGATOR: "apiregistration/v1", APIEXTENSIONS: "apiextensions/v1"}.get(
        path, path.rsplit("k8s.io/", 1)[-1])
    print(f'    Message {{ name: "{short}.{name}", by_num: &{by_num}, fields: &[')
    for (num, js, kind, card, omit) in fs:
        print(f'        Field {{ num: {num}, json: "{js}", kind: {kind}, card: {card}, omit: {omit} }},')
    print("    ] },")
print("];")
print()
print("/// (apiVersion, kind) of every top-level built-in type, sorted, with its message.")
print(f"pub(crate) static KINDS: [(&str, &str, u16); {len(kinds)}] = [")
for av, k, i in sorted(kinds):
    print(f'    ("{av}", "{k}", {i}),')
print("];")
