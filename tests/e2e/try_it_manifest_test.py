#!/usr/bin/env python3
"""Checks the try-it configuration (SIMULATED GPUs, docs/try-it.md) as rendered, without a cluster.

- the overlay examples/try-it/deploy (`kubectl kustomize`; skipped where kubectl is missing)
  differs from deploy/ only as docs/try-it.md lists: in the two node DaemonSets, the selector
  label, the runtime class, the NVIDIA_* variables, the --nvml/--device-nodes/--vgpu-library
  flags, the seed init container and its volumes, the interception library's init container and
  volume; and one new ConfigMap, prism-simulated-gpus. Nothing else in the stack differs;
- the chart with `simulation.enabled=true` renders those DaemonSets and that ConfigMap as the
  overlay does (normalized for Helm's labels, pull policy and kustomize's hash suffixes), and
  nothing else differently; with the value off it renders the base's DaemonSets;
- the simulated DaemonSets run only on nodes labelled prism.io/simulated-gpus=true, reach no
  /dev path and no host path the base does not (but the state directory), and have no more
  privilege than the base's; both see one state file on the host;
- tests/e2e/helm_render.py's template comments lex as Go's text/template does, and a null
  user value deletes the chart's key as Helm's coalescing does (simulation.gpus.default).
"""
import copy
import os
import re
import shutil
import subprocess
import sys
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import deploy_test  # noqa: E402
import helm_render  # noqa: E402
from deploy_test import CHART, DEPLOY, NS, ROOT, container, env_of, find, key, pod_spec, runs_on  # noqa: E402

OVERLAY = os.path.join(ROOT, "examples", "try-it", "deploy")
SIM_LABEL = "prism.io/simulated-gpus"
STATE_DIR = "/var/lib/prism/sim"
NVML_FLAG = f"--nvml=sim:{STATE_DIR}/gpus.yaml"
AGENT = ("prism-device-plugin", "device-plugin")
MIG_MANAGER = ("prism-mig-manager", "mig-manager")
SIM_CONFIGMAP = "prism-simulated-gpus"
# Labels the chart adds to every object ("prism.labels") and kustomize to the base's metadata.
CHART_LABELS = ("app.kubernetes.io/part-of", "app.kubernetes.io/managed-by", "helm.sh/chart")


def kustomize(path):
    """`kubectl kustomize path` as objects, cluster-scoped ones without the namespace kustomize
    gives them (as deploy_test.kustomize_objects); None without kubectl."""
    kubectl = shutil.which("kubectl")
    if not kubectl:
        return None
    out = subprocess.run([kubectl, "kustomize", path], check=True, capture_output=True,
                         text=True).stdout
    objects = [d for d in yaml.safe_load_all(out) if d]
    for o in objects:
        if o["kind"] in deploy_test.CLUSTER_SCOPED:
            o["metadata"].pop("namespace", None)
    return objects


def by_key(objects):
    keyed = {}
    for o in objects:
        assert key(o) not in keyed, key(o)
        keyed[key(o)] = o
    return keyed


def normalized(o):
    """What deploy_test compares between the chart and deploy/: the object without Helm's labels,
    pull policies and kustomize's hash suffixes on generated ConfigMaps' names."""
    o = copy.deepcopy(o)
    o["metadata"]["name"] = key(o)[1]
    for meta in (o["metadata"], o.get("spec", {}).get("template", {}).get("metadata", {})):
        for label in CHART_LABELS:
            meta.get("labels", {}).pop(label, None)
    if "template" in o.get("spec", {}):
        spec = pod_spec(o)
        for c in spec.get("initContainers", []) + spec["containers"]:
            c.pop("imagePullPolicy", None)
        for v in spec.get("volumes", []):
            if "configMap" in v:
                v["configMap"]["name"] = re.sub(r"-[0-9a-z]{10}$", "", v["configMap"]["name"])
    return o


def all_containers(ds):
    spec = pod_spec(ds)
    return spec.get("initContainers", []) + spec["containers"]


def host_path_of(ds, cname, path):
    """The host path a container's `path` is, through its hostPath mounts (None if not one)."""
    spec = pod_spec(ds)
    c = [c for c in all_containers(ds) if c["name"] == cname][0]
    mounts = sorted(c.get("volumeMounts", []), key=lambda m: -len(m["mountPath"]))
    for m in mounts:
        if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/"):
            vol = [v for v in spec["volumes"] if v["name"] == m["name"]][0]
            if "hostPath" not in vol:
                return None
            return vol["hostPath"]["path"].rstrip("/") + path[len(m["mountPath"].rstrip("/")):]
    return None


def simulated(base_ds, seed):
    """deploy/'s DaemonSet with exactly the changes docs/try-it.md lists, given the seed init
    container (checked on its own)."""
    ds = copy.deepcopy(base_ds)
    spec = pod_spec(ds)
    assert spec.pop("runtimeClassName") == "nvidia"
    c = spec["containers"][0]
    nvidia = [e["name"] for e in c["env"] if e["name"].startswith("NVIDIA_")]
    assert nvidia == ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"], nvidia
    c["env"] = [e for e in c["env"] if not e["name"].startswith("NVIDIA_")]
    if c["name"] == AGENT[1]:
        assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        spec["nodeSelector"] = {SIM_LABEL: "true"}
        c["args"] += [NVML_FLAG, "--device-nodes=false", "--vgpu-library=none"]
        # The library's installer goes, and with it the only use of its host directory.
        (installer,) = spec["initContainers"]
        assert installer["name"] == "install-vgpu-library"
        assert [m["name"] for m in installer["volumeMounts"]] == ["vgpu-lib"]
        assert not any(m["name"] == "vgpu-lib" for m in c["volumeMounts"])
        spec["volumes"] = [v for v in spec["volumes"] if v["name"] != "vgpu-lib"]
    else:
        expr = (spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"][0]["matchExpressions"][0])
        assert expr == {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}
        expr["key"] = SIM_LABEL
        c["args"].append(NVML_FLAG)
        c["volumeMounts"].append({"name": "simulated-gpus-state", "mountPath": STATE_DIR})
        assert "initContainers" not in spec
    spec["initContainers"] = [seed]
    spec["volumes"] += [
        {"name": "simulated-gpus", "configMap": {"name": SIM_CONFIGMAP}},
        {"name": "simulated-gpus-state",
         "hostPath": {"path": STATE_DIR, "type": "DirectoryOrCreate"}}]
    return ds


def node_objects(objects):
    return [find(objects, "DaemonSet", AGENT[0]), find(objects, "DaemonSet", MIG_MANAGER[0]),
            find(objects, "ConfigMap", SIM_CONFIGMAP)]


class Simulation:
    """Checks of a simulated stack (the overlay, the chart with the value) against deploy/'s."""

    objects = []
    base = []

    def assert_only_node_objects_differ(self):
        """Every object but the two DaemonSets and the new ConfigMap is the base's, as is."""
        sim, base = by_key(self.objects), by_key(self.base)
        for o in node_objects(self.objects):
            sim.pop(key(o))
        for name, _ in (AGENT, MIG_MANAGER):
            base.pop(key(find(self.base, "DaemonSet", name)))
        self.assertEqual(set(sim), set(base))
        for k, o in sim.items():
            self.assertEqual(o, base[k], k)

    def test_seed_container(self):
        seeds = [pod_spec(find(self.objects, "DaemonSet", name))["initContainers"]
                 for name, _ in (AGENT, MIG_MANAGER)]
        self.assertEqual(seeds[0], seeds[1])
        (seed,) = seeds[0]
        self.assertEqual(seed["name"], "seed-simulated-gpus")
        agent = find(self.objects, "DaemonSet", AGENT[0])
        self.assertEqual(seed["image"], container(agent, AGENT[1])["image"])
        self.assertNotIn("securityContext", seed)
        self.assertEqual(seed["command"][:2], ["sh", "-c"])
        self.assertEqual(list(env_of(seed)), ["NODE_NAME"])
        self.assertEqual(seed["env"][0]["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName")
        self.assertEqual({m["mountPath"]: (m["name"], m.get("readOnly", False))
                          for m in seed["volumeMounts"]},
                         {"/etc/prism/simulated-gpus": ("simulated-gpus", True),
                          STATE_DIR: ("simulated-gpus-state", False)})
        script = seed["command"][2]
        for word in ("/etc/prism/simulated-gpus", STATE_DIR, "gpus.yaml", "uuid_seed: $NODE_NAME",
                     "SIMULATED GPUs"):
            self.assertIn(word, script)

    def test_node_daemonsets_differ_from_the_base_only_as_documented(self):
        for name, _ in (AGENT, MIG_MANAGER):
            got = normalized(find(self.objects, "DaemonSet", name))
            want = simulated(normalized(find(self.base, "DaemonSet", name)),
                             pod_spec(got)["initContainers"][0])
            self.assertEqual(got, want, name)

    def test_the_simulated_gpus_configmap(self):
        cm = find(self.objects, "ConfigMap", SIM_CONFIGMAP)
        self.assertEqual(cm["metadata"]["name"], SIM_CONFIGMAP)  # Read by name: no hash suffix.
        self.assertEqual(cm["metadata"]["namespace"], NS)
        with open(os.path.join(OVERLAY, "simulated-gpus", "default.yaml")) as f:
            self.assertEqual(cm["data"], {"default": f.read()})
        gpus = yaml.safe_load(cm["data"]["default"])
        self.assertNotIn("uuid_seed", gpus)  # The seed writes the node's name.
        self.assertEqual([(g["model"], g.get("mig", {}).get("enabled", False)) for g in gpus["gpus"]],
                         [("A100-PCIE-40GB", True), ("H100-SXM5-80GB", False), ("Tesla T4", False)])

    def test_runs_only_on_nodes_labelled_simulated(self):
        sim = {SIM_LABEL: "true"}
        for name, _ in (AGENT, MIG_MANAGER):
            ds = find(self.objects, "DaemonSet", name)
            self.assertTrue(runs_on(ds, sim), name)
            self.assertTrue(runs_on(ds, {**sim, "nvidia.com/mig.config": "all-balanced"}), name)
            for labels in ({}, {"nvidia.com/gpu.present": "true"}, {SIM_LABEL: "false"},
                           {SIM_LABEL: "True"}, {"nvidia.com/gpu.present": "true",
                                                 "nvidia.com/mig.capable": "true"}):
                self.assertFalse(runs_on(ds, labels), f"{name} on {labels}")
            # Paused for a MIG change, as the base's agent is.
            self.assertEqual(runs_on(ds, {**sim, "prism.io/gpu.deploy.device-plugin":
                                          "paused-for-mig-change"}), name != AGENT[0], name)
        mig = find(self.objects, "DaemonSet", MIG_MANAGER[0])
        self.assertFalse(runs_on(mig, {**sim, "nvidia.com/mig.capable": "false"}))

    def test_no_device_access_beyond_the_base(self):
        for name, cname in (AGENT, MIG_MANAGER):
            ds, base_ds = (find(objs, "DaemonSet", name) for objs in (self.objects, self.base))
            spec, base_spec = pod_spec(ds), pod_spec(base_ds)
            self.assertNotIn("runtimeClassName", spec, name)
            for field in ("hostPID", "hostIPC", "hostNetwork", "securityContext"):
                self.assertEqual(spec.get(field), base_spec.get(field), f"{name} {field}")
            host_paths = {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
            base_paths = {v["hostPath"]["path"] for v in base_spec["volumes"] if "hostPath" in v}
            self.assertLessEqual(host_paths, base_paths | {STATE_DIR}, name)
            self.assertFalse([p for p in host_paths if p == "/dev" or p.startswith("/dev/")], name)
            self.assertNotIn("/usr/local/prism/lib", host_paths, name)  # No interception library.
            base_contexts = {c["name"]: c.get("securityContext") for c in all_containers(base_ds)}
            for c in all_containers(ds):
                self.assertEqual(c.get("securityContext"), base_contexts.get(c["name"]),
                                 f"{name} {c['name']}")
                self.assertFalse([e for e in env_of(c) if e.startswith("NVIDIA_")], c["name"])
                self.assertFalse([m for m in c.get("volumeMounts", [])
                                  if m["mountPath"].startswith("/dev")], c["name"])
                self.assertNotIn("volumeDevices", c)
            self.assertIn(NVML_FLAG, container(ds, cname)["args"], name)
        self.assertIn("--device-nodes=false", container(find(self.objects, "DaemonSet", AGENT[0]),
                                                        AGENT[1])["args"])

    def test_agent_and_mig_manager_share_one_state_file(self):
        files = set()
        for name, cname in (AGENT, MIG_MANAGER):
            ds = find(self.objects, "DaemonSet", name)
            (path,) = [a.split(":", 1)[1] for a in container(ds, cname)["args"]
                       if a.startswith("--nvml=")]
            files.add(host_path_of(ds, cname, path))
            files.add(host_path_of(ds, "seed-simulated-gpus", path))
        self.assertEqual(files, {f"{STATE_DIR}/gpus.yaml"})

    def test_every_flag_passed_to_prism_exists(self):
        binary = os.environ.get("PRISM_BINARY", "")
        if not binary or not os.access(binary, os.X_OK):
            self.skipTest("prism binary not built")
        for name, cname in (AGENT, MIG_MANAGER):
            args = container(find(self.objects, "DaemonSet", name), cname)["args"]
            help_text = subprocess.run([binary, args[0], "--help"], capture_output=True,
                                       text=True).stdout
            for a in args[1:]:
                self.assertRegex(help_text, re.escape(a.split("=", 1)[0]) + r"\b", f"{name}: {a}")


class OverlayTest(Simulation, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.objects = kustomize(OVERLAY)
        cls.base = kustomize(DEPLOY)

    def setUp(self):
        if self.objects is None:
            self.skipTest("kubectl not found: the overlay's RFC 6902 patches need kustomize")

    def test_nothing_else_differs_from_the_base(self):
        self.assert_only_node_objects_differ()


class ChartTest(Simulation, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.objects = helm_render.render_objects(CHART, {"simulation": {"enabled": True}},
                                                 namespace=NS)
        cls.base = helm_render.render_objects(CHART, namespace=NS)
        cls.overlay = kustomize(OVERLAY)
        cls.deploy = kustomize(DEPLOY)

    def test_chart_renders_the_overlays_node_objects(self):
        if self.overlay is None:
            self.skipTest("kubectl not found: the overlay's RFC 6902 patches need kustomize")
        for chart, overlay in zip(node_objects(self.objects), node_objects(self.overlay)):
            self.assertEqual(normalized(chart), normalized(overlay), key(overlay))

    def test_nothing_else_differs_from_the_default_chart(self):
        self.assert_only_node_objects_differ()

    def test_off_the_chart_is_deploys(self):
        self.assertEqual(helm_render.render_chart(CHART, {"simulation": {"enabled": False}}, NS),
                         helm_render.render_chart(CHART, namespace=NS))
        self.assertFalse([o for o in self.base if o["metadata"]["name"] == SIM_CONFIGMAP])
        if self.deploy is None:
            self.skipTest("kubectl not found")
        for name, _ in (AGENT, MIG_MANAGER):
            self.assertEqual(normalized(find(self.base, "DaemonSet", name)),
                             normalized(find(self.deploy, "DaemonSet", name)), name)

    def test_gpus_per_node_and_other_values(self):
        mine = "gpus:\n  - model: Tesla T4\n    name: Tesla T4\n    memory_mib: 15360\n"
        objs = helm_render.render_objects(CHART, {
            "simulation": {"enabled": True, "gpus": {"kind-worker2": mine}},
            "devicePlugin": {"nodeSelector": {"gpu": "yes"}, "runtimeClassName": "nvidia-cdi",
                             "extraArgs": ["--log-level=debug"]}}, namespace=NS)
        cm = find(objs, "ConfigMap", SIM_CONFIGMAP)
        self.assertEqual(cm["data"]["kind-worker2"], mine)
        self.assertEqual(cm["data"]["default"],
                         find(self.objects, "ConfigMap", SIM_CONFIGMAP)["data"]["default"])
        agent = find(objs, "DaemonSet", AGENT[0])
        self.assertEqual(pod_spec(agent)["nodeSelector"], {SIM_LABEL: "true"})
        for name, _ in (AGENT, MIG_MANAGER):
            self.assertNotIn("runtimeClassName", pod_spec(find(objs, "DaemonSet", name)), name)
        # The user's flags come last: they may override the simulation's.
        self.assertEqual(container(agent, AGENT[1])["args"][-4:],
                         [NVML_FLAG, "--device-nodes=false", "--vgpu-library=none",
                          "--log-level=debug"])
        # A null drops the default (Helm deletes a key the user sets to null).
        objs = helm_render.render_objects(CHART, {"simulation": {
            "enabled": True, "gpus": {"default": None, "kind-worker2": mine}}}, namespace=NS)
        self.assertEqual(find(objs, "ConfigMap", SIM_CONFIGMAP)["data"], {"kind-worker2": mine})
        # Without the MIG manager, the agent still seeds the state.
        objs = helm_render.render_objects(CHART, {"simulation": {"enabled": True},
                                                  "migManager": {"enabled": False}}, namespace=NS)
        self.assertEqual(normalized(find(objs, "DaemonSet", AGENT[0])),
                         normalized(find(self.objects, "DaemonSet", AGENT[0])))
        find(objs, "ConfigMap", SIM_CONFIGMAP)


class TemplateCommentTest(unittest.TestCase):
    """helm_render's comments, as text/template's lexer (lexComment) takes them."""

    def render(self, text):
        r = helm_render.Renderer(CHART, {"a": 1}, NS)
        return r._render(helm_render._parse(helm_render._tokenize(text, "t"), "t"), "t")

    def test_comments(self):
        self.assertEqual(self.render("x{{/* a {{ b */}}y"), "xy")
        self.assertEqual(self.render("x \n{{- /* multi\nline */ -}}\n y{{ .Values.a }}"), "xy1")
        self.assertEqual(self.render("x {{- /* c */}} y"), "x y")
        self.assertEqual(self.render("x {{/* c */ -}} y"), "x y")

    def test_malformed_comments_fail(self):
        for text in ("{{ /* c */ }}", "{{-/* c */}}", "{{/* c */-}}", "{{/* c */ x}}",
                     "{{/* c */  -}}"):
            with self.assertRaises(helm_render.TemplateError, msg=text):
                self.render(text)


if __name__ == "__main__":
    unittest.main(verbosity=2)
