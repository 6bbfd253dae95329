#!/usr/bin/env python3
"""Renders a Helm chart with the subset of Go templates Prism's chart uses (Helm itself cannot be
installed here). Supported: text with {{ }} actions and {{- -}} whitespace trimming; comments
({{/* */}}, {{- /* */ -}}, as Go's text/template lexes them); `define`,
`include`, `if`/`else`/`end`; values (.Values.a.b, .Release.*, .Chart.*, .Files.Get "path", .);
string and number literals; the functions default, quote, toYaml, indent, nindent, not, eq.
Anything else raises an error naming the template and the action, so a chart that strays from
the subset fails loudly instead of rendering wrong.

  render_chart(chart_dir, values_overrides={}, namespace="prism-system") -> {template: text}
"""
import copy
import os
import re
import shlex

import yaml


class TemplateError(Exception):
    pass


def _merge(base, override):
    """Helm's coalescing of user values over the chart's (pkg/chartutil/coalesce.go,
    CoalesceTables): maps merge, anything else replaces, and a null deletes the chart's key."""
    out = copy.deepcopy(base)
    for k, v in override.items():
        if v is None and k in out:
            del out[k]
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _truthy(v):
    return not (v is None or v is False or v == 0 or v == "" or v == [] or v == {})


def _to_yaml(v):
    if v is None:
        return "null"
    return yaml.safe_dump(v, default_flow_style=False, sort_keys=False).rstrip("\n")


def _indent(n, text):
    pad = " " * int(n)
    return "\n".join(pad + line if line else line for line in str(text).split("\n"))


_ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)
# Go's lexComment: "/*" right after the delimiter (or after "- "), "*/" right before it (or
# before " -"); a comment with other spacing, or text after "*/", is an error there too.
_COMMENT = re.compile(r"\{\{(?:- )?/\*.*?\*/(?: -)?\}\}", re.S)


def _tokenize(text, where):
    """[('text', s) | ('action', s)] with whitespace trimming applied."""
    parts = []
    pos = 0
    for m in _ACTION.finditer(text):
        before = text[pos:m.start()]
        if m.group(1):
            before = before.rstrip(" \t\r\n")
        parts.append(["text", before])
        if m.group(2).startswith("/*") or m.group(2).endswith("*/"):
            if not _COMMENT.fullmatch(m.group(0)):
                raise TemplateError(f"{where}: malformed comment {m.group(0)[:40]!r}")
            parts.append(["comment", "", m.group(3) == "-"])
        else:
            parts.append(["action", m.group(2), m.group(3) == "-"])
        pos = m.end()
    parts.append(["text", text[pos:]])
    # Right trims apply to the following text.
    for i, p in enumerate(parts):
        if p[0] != "text" and p[2] and i + 1 < len(parts):
            parts[i + 1][1] = parts[i + 1][1].lstrip(" \t\r\n")
    if "{{" in "".join(p[1] for p in parts if p[0] == "text"):
        raise TemplateError(f"{where}: unbalanced {{{{")
    return [(p[0], p[1]) for p in parts if p[0] != "comment"]


def _parse(tokens, where):
    """Tree: list of str | ('if', expr, then, else) | ('define', name, body) | ('expr', expr)."""
    root = []
    stack = [(root, None)]
    for kind, s in tokens:
        body = stack[-1][0]
        if kind == "text":
            if s:
                body.append(s)
            continue
        word = s.split(None, 1)[0] if s else ""
        rest = s[len(word):].strip()
        if word == "if":
            node = ["if", rest, [], []]
            body.append(node)
            stack.append((node[2], node))
        elif word == "else":
            frame = stack[-1][1]
            if frame is None or frame[0] != "if":
                raise TemplateError(f"{where}: else without if")
            stack[-1] = (frame[3], frame)
        elif word == "define":
            node = ["define", shlex.split(rest)[0], []]
            body.append(node)
            stack.append((node[2], node))
        elif word == "end":
            if len(stack) == 1:
                raise TemplateError(f"{where}: end without a block")
            stack.pop()
        elif word in ("range", "with", "template", "block", "tpl"):
            raise TemplateError(f"{where}: '{word}' is outside the supported subset")
        else:
            body.append(("expr", s))
    if len(stack) != 1:
        raise TemplateError(f"{where}: unclosed block")
    return root


class Renderer:
    def __init__(self, chart_dir, values, namespace, release="prism"):
        self.chart_dir = chart_dir
        with open(os.path.join(chart_dir, "Chart.yaml")) as f:
            chart = yaml.safe_load(f)
        self.ctx = {
            "Values": values,
            "Release": {"Namespace": namespace, "Name": release, "Service": "Helm"},
            "Chart": {"Name": chart["name"], "Version": chart["version"],
                      "AppVersion": chart.get("appVersion", "")},
        }
        self.defines = {}

    def _lookup(self, path, where):
        if path == ".":
            return self.ctx
        node = self.ctx
        for part in path.strip(".").split("."):
            if not isinstance(node, dict):
                raise TemplateError(f"{where}: {path}: not a map")
            if part not in node:
                raise TemplateError(f"{where}: {path}: no such value")
            node = node[part]
        return node

    def _arg(self, tok, where):
        if tok.startswith('"'):
            return shlex.split(tok)[0]
        if re.fullmatch(r"-?\d+", tok):
            return int(tok)
        if tok.startswith("."):
            return self._lookup(tok, where)
        raise TemplateError(f"{where}: cannot read argument {tok!r}")

    def _command(self, words, piped, where):
        fn, args = words[0], words[1:]
        has_pipe = piped is not _NOTHING
        if fn == ".Files.Get":
            with open(os.path.join(self.chart_dir, self._arg(args[0], where))) as f:
                return f.read().rstrip("\n")
        if fn.startswith(".") or fn.startswith('"') or re.fullmatch(r"-?\d+", fn):
            if args or has_pipe:
                raise TemplateError(f"{where}: unexpected arguments after {fn}")
            return self._arg(fn, where)
        vals = [self._arg(a, where) for a in args]
        if has_pipe:
            vals.append(piped)
        if fn == "include":
            name = vals[0]
            if name not in self.defines:
                raise TemplateError(f"{where}: include of undefined template {name!r}")
            return self._render(self.defines[name], where).strip("\n")
        if fn == "default":
            return vals[1] if _truthy(vals[1]) else vals[0]
        if fn == "quote":
            v = vals[0]
            text = ("true" if v else "false") if isinstance(v, bool) else str(v)  # Go's %v.
            return '"' + text.replace('"', '\\"') + '"'
        if fn == "toYaml":
            return _to_yaml(vals[0])
        if fn == "nindent":
            return "\n" + _indent(vals[0], vals[1])
        if fn == "indent":
            return _indent(vals[0], vals[1])
        if fn == "not":
            return not _truthy(vals[0])
        if fn == "eq":
            return vals[0] == vals[1]
        raise TemplateError(f"{where}: function {fn!r} is outside the supported subset")

    def _eval(self, expr, where):
        value = _NOTHING
        for cmd in expr.split("|"):
            words = shlex.split(cmd, posix=False)
            if not words:
                raise TemplateError(f"{where}: empty command in {expr!r}")
            value = self._command(words, value, where)
        return value

    def _render(self, tree, where):
        out = []
        for node in tree:
            if isinstance(node, str):
                out.append(node)
            elif node[0] == "expr":
                v = self._eval(node[1], where)
                out.append("" if v is None else (str(v).lower() if isinstance(v, bool) else str(v)))
            elif node[0] == "if":
                branch = node[2] if _truthy(self._eval(node[1], where)) else node[3]
                out.append(self._render(branch, where))
            elif node[0] == "define":
                pass
        return "".join(out)

    def render(self):
        templates = os.path.join(self.chart_dir, "templates")
        trees = {}
        for name in sorted(os.listdir(templates)):
            with open(os.path.join(templates, name)) as f:
                tree = _parse(_tokenize(f.read(), name), name)
            for node in tree:
                if not isinstance(node, str) and node[0] == "define":
                    self.defines[node[1]] = node[2]
            trees[name] = tree
        return {name: self._render(tree, name) for name, tree in trees.items()
                if not name.startswith("_")}


class _Nothing:
    pass


_NOTHING = _Nothing()


def render_chart(chart_dir, values_overrides=None, namespace="prism-system"):
    with open(os.path.join(chart_dir, "values.yaml")) as f:
        values = yaml.safe_load(f) or {}
    values = _merge(values, values_overrides or {})
    return Renderer(chart_dir, values, namespace).render()


def render_objects(chart_dir, values_overrides=None, namespace="prism-system"):
    objects = []
    for name, text in render_chart(chart_dir, values_overrides, namespace).items():
        for doc in yaml.safe_load_all(text):
            if doc:
                objects.append(doc)
    return objects


if __name__ == "__main__":
    import sys
    for name, text in render_chart(sys.argv[1] if len(sys.argv) > 1 else "charts/prism").items():
        print(f"---\n# Source: {name}\n{text}")
