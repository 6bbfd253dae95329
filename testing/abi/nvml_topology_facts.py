#!/usr/bin/env python3
"""Derives the NVML topology facts added to nvml-abi.json (PROVENANCE.md, "Topology entries").

Usage: nvml_topology_facts.py <nvml.h> > facts.json
where <nvml.h> is `git show <commit>:gen/nvml/nvml.h` of github.com/NVIDIA/go-nvml at the commit
nvml-abi.json names. Same method as the shared set: clang's JSON AST for prototypes and typedefs,
and a C program compiled against the header for sizes and constant values. Only derived facts
(names, numbers, type spellings) are printed; no header text.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

FUNCTIONS = [
    "nvmlDeviceGetNumaNodeId", "nvmlDeviceGetCpuAffinity", "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkRemotePciInfo_v2", "nvmlDeviceGetNvLinkRemoteDeviceType",
    "nvmlDeviceGetP2PStatus", "nvmlDeviceGetTopologyCommonAncestor",
]
TYPES = ["nvmlEnableState_t", "nvmlGpuTopologyLevel_t", "nvmlGpuP2PStatus_t",
         "nvmlGpuP2PCapsIndex_t", "nvmlIntNvLinkDeviceType_t"]
CONSTANTS = [
    "NVML_NVLINK_MAX_LINKS", "NVML_FEATURE_DISABLED", "NVML_FEATURE_ENABLED",
    "NVML_TOPOLOGY_INTERNAL", "NVML_TOPOLOGY_SINGLE", "NVML_TOPOLOGY_MULTIPLE",
    "NVML_TOPOLOGY_HOSTBRIDGE", "NVML_TOPOLOGY_NODE", "NVML_TOPOLOGY_SYSTEM",
    "NVML_P2P_CAPS_INDEX_NVLINK", "NVML_P2P_STATUS_OK", "NVML_NVLINK_DEVICE_TYPE_GPU",
    "NVML_NVLINK_DEVICE_TYPE_IBMNPU", "NVML_NVLINK_DEVICE_TYPE_SWITCH",
    "NVML_NVLINK_DEVICE_TYPE_UNKNOWN",
]


def canonical(qual, typedefs):
    """The tables' spelling: typedefs expanded, enums as int, uint, u64, `struct tag*`."""
    qual = qual.strip()
    stars = ""
    while qual.endswith("*"):
        stars += "*"
        qual = qual[:-1].strip()
    const = ""
    if qual.startswith("const "):
        const, qual = "const ", qual[6:].strip()
    if qual in typedefs:
        return const + canonical(typedefs[qual], typedefs) + stars
    if qual.startswith("enum "):
        base = "int"
    elif qual.startswith("struct "):
        base = qual
    else:
        base = {"unsigned int": "uint", "unsigned long": "u64", "unsigned long long": "u64"}.get(
            qual, qual)
    return const + base + stars


def main():
    header = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "t.c")
        with open(src, "w") as f:
            f.write('#include "%s"\n' % header)
        ast = json.loads(subprocess.run(
            ["clang", "-Xclang", "-ast-dump=json", "-fsyntax-only", src],
            check=True, capture_output=True, text=True).stdout)
        typedefs = {}
        functions = {}
        for node in ast["inner"]:
            if node.get("kind") == "TypedefDecl":
                t = node["type"]
                typedefs[node["name"]] = t.get("desugaredQualType", t["qualType"])
            if node.get("kind") == "FunctionDecl" and node.get("name") in FUNCTIONS:
                params = [p["type"]["qualType"] for p in node.get("inner", [])
                          if p.get("kind") == "ParmVarDecl"]
                returns = re.match(r"^(.*?)\s*\(", node["type"]["qualType"]).group(1)
                functions[node["name"]] = {"returns": returns, "params": params}
        for name, fn in functions.items():
            fn["params_canonical"] = [canonical(p, typedefs) for p in fn["params"]]
            fn["returns_canonical"] = canonical(fn["returns"], typedefs)
        prog = os.path.join(tmp, "p.c")
        with open(prog, "w") as f:
            f.write('#include <stdio.h>\n#include "%s"\nint main(void) {\n' % header)
            for c in CONSTANTS:
                f.write('  printf("C %s %%lld\\n", (long long)(%s));\n' % (c, c))
            for t in TYPES:
                f.write('  printf("T %s %%zu %%zu\\n", sizeof(%s), _Alignof(%s));\n' % (t, t, t))
            f.write("  return 0;\n}\n")
        # The public un-suffixed name the header maps a versioned symbol to (cc -E, as the shared
        # set's `macro_of`).
        bases = {re.sub(r"_v\d+$", "", f): f for f in functions if re.search(r"_v\d+$", f)}
        probe = os.path.join(tmp, "m.c")
        with open(probe, "w") as f:
            f.write('#include "%s"\n' % header)
            for base in bases:
                f.write("PRISM_PROBE %s\n" % base)
        expanded = subprocess.run(["cc", "-E", "-P", probe], check=True, capture_output=True,
                                  text=True).stdout
        for base, versioned in bases.items():
            if ("PRISM_PROBE " + versioned) in expanded.splitlines():
                functions[versioned]["macro_of"] = base
        exe = os.path.join(tmp, "p")
        subprocess.run(["cc", "-std=c11", "-o", exe, prog], check=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    constants, types = {}, {}
    for line in out.splitlines():
        kind, name, *values = line.split()
        if kind == "C":
            constants[name] = int(values[0])
        else:
            types[name] = {"size": int(values[0]), "align": int(values[1]),
                           "canonical": canonical(name, typedefs)}
    missing = [f for f in FUNCTIONS if f not in functions]
    if missing:
        sys.exit("not declared by the header: " + ", ".join(missing))
    json.dump({"constants": constants, "types": types, "functions": functions}, sys.stdout,
              indent=1)
    print()


if __name__ == "__main__":
    main()
