#!/usr/bin/env python3
"""The DRA opt-in as shipped (docs/dra.md#deploying): examples/dra over deploy/ + deploy/dra, and
the chart's dra.enabled, add exactly their objects and the node agent's flag and mounts, and are
equal to each other; the shared wiring checks of deploy_test.py hold for both. Split from
deploy_test.py, whose helpers it uses."""
import copy
import json
import os
import re
import subprocess
import sys
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from deploy_test import (  # noqa: E402
    CHART,
    DEPLOY,
    NS,
    ROOT,
    Wiring,
    container,
    find,
    flag_values,
    helm_render,
    key,
    kubectl_kustomize,
    pod_spec,
)


# --- DRA, opt-in (docs/dra.md#deploying) --------------------------------------------------------

DRA_OVERLAY = os.path.join(ROOT, "examples", "dra")
DRA_DRIVER = "gpu.prism.io"
# What the opt-in adds, by (kind, name); besides, the node agent's DaemonSet changes.
DRA_OBJECTS = {("ClusterRole", "prism-device-plugin-dra"),
               ("ClusterRoleBinding", "prism-device-plugin-dra"),
               ("ValidatingAdmissionPolicy", "prism-node-scoped-resourceslices"),
               ("ValidatingAdmissionPolicyBinding", "prism-node-scoped-resourceslices"),
               ("DeviceClass", DRA_DRIVER),
               ("DeviceClass", f"mig.{DRA_DRIVER}"),
               ("DeviceClass", f"slice.{DRA_DRIVER}"),
               ("ClusterRole", "prism-scheduler-dra"),
               ("ClusterRoleBinding", "prism-scheduler-dra"),
               ("MutatingWebhookConfiguration", "prism-dra-gate")}
# The kubelet's directories: where `prism device-plugin` serves its sockets by default
# (--dra-registry-dir, --dra-plugin-dir), and where the kubelet looks (docs/dra-design.md §1.1).
DRA_HOST_DIRS = {"kubelet-plugins-registry": "/var/lib/kubelet/plugins_registry",
                 "dra-plugin": f"/var/lib/kubelet/plugins/{DRA_DRIVER}"}


def with_dra(agent_ds):
    """The node agent's DaemonSet with exactly the changes docs/dra.md#deploying lists."""
    ds = copy.deepcopy(agent_ds)
    c = pod_spec(ds)["containers"][0]
    assert c["name"] == "device-plugin"
    c["args"] += ["--dra=true", "--dra-consumable-capacity=true"]
    for name, path in DRA_HOST_DIRS.items():
        c["volumeMounts"].append({"name": name, "mountPath": path})
    for name, path in DRA_HOST_DIRS.items():
        pod_spec(ds)["volumes"].append({"name": name, "hostPath": {
            "path": path, "type": "Directory" if name == "kubelet-plugins-registry"
            else "DirectoryOrCreate"}})
    return ds


def unhashed_config(deployment):
    """A copy whose ConfigMap volumes name the ConfigMap without kustomize's content hash."""
    d = copy.deepcopy(deployment)
    for v in pod_spec(d).get("volumes", []):
        if "configMap" in v:
            v["configMap"]["name"] = re.sub(r"-[a-z0-9]{10}$", "", v["configMap"]["name"])
    return d


def dra_parts(objects):
    """{(kind, name): object} of the DRA objects in a rendering."""
    return {(o["kind"], key(o)[1]): o for o in objects if (o["kind"], key(o)[1]) in DRA_OBJECTS}


class DraOptIn:
    """A rendering with DRA on (self.objects) against the same source with it off (self.off)."""

    objects, off = [], []

    def test_adds_exactly_its_objects_and_the_agents_flag_and_mounts(self):
        on = {key(o): o for o in self.objects}
        off = {key(o): o for o in self.off}
        added = {(k[0], k[1]) for k in set(on) - set(off)}
        self.assertEqual(added, DRA_OBJECTS)
        self.assertEqual(set(off) - set(on), set())
        ds = key(find(self.off, "DaemonSet", "prism-device-plugin"))
        self.assertEqual(on[ds], with_dra(off[ds]))
        # The scheduler allocates claims; kube-scheduler is 1.34+ and consults the extender for
        # every pod of its profile (docs/dra.md#deploying).
        sched = key(find(self.off, "Deployment", "prism-scheduler"))
        expected = copy.deepcopy(off[sched])
        container(expected, "scheduler")["args"].append("--dra")
        self.assertEqual(on[sched], expected)
        ks = key(find(self.off, "Deployment", "prism-kube-scheduler"))
        image = container(on[ks], "kube-scheduler")["image"]
        self.assertRegex(image, r":v1\.(3[4-9]|[4-9][0-9])\.")
        cm = key(find(self.off, "ConfigMap", "prism-kube-scheduler-config"))
        cfg_on = yaml.safe_load(on[cm]["data"]["kube-scheduler-config.yaml"])
        cfg_off = yaml.safe_load(off[cm]["data"]["kube-scheduler-config.yaml"])
        ignored = [m["name"] for m in cfg_off["extenders"][0].pop("managedResources")]
        cfg_off["profiles"][0]["pluginConfig"] = [
            {"name": "NodeResourcesFit", "args": {"ignoredResources": ignored}}]
        self.assertEqual(cfg_on, cfg_off)
        for k, o in off.items():
            if k not in (ds, sched, cm):
                mine = on[k]
                if k == ks:
                    # The image, and the configuration's name (kustomize hashes the content).
                    o, mine = unhashed_config(o), unhashed_config(mine)
                    container(o, "kube-scheduler")["image"] = image
                self.assertEqual(mine, o, k)

    def test_rights_are_bound_to_the_agents_account(self):
        ds = find(self.objects, "DaemonSet", "prism-device-plugin")
        binding = find(self.objects, "ClusterRoleBinding", "prism-device-plugin-dra")
        self.assertEqual(binding["roleRef"], {"apiGroup": "rbac.authorization.k8s.io",
                                              "kind": "ClusterRole",
                                              "name": "prism-device-plugin-dra"})
        self.assertEqual(binding["subjects"], [{
            "kind": "ServiceAccount", "name": pod_spec(ds)["serviceAccountName"],
            "namespace": ds["metadata"]["namespace"]}])

    def test_kubelet_directories_are_mounted_at_their_host_paths(self):
        # The registration socket names dra.sock by the agent's path for it, which the kubelet
        # dials on the host: the two must be the same path.
        ds = find(self.objects, "DaemonSet", "prism-device-plugin")
        c = container(ds, "device-plugin")
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        vols = {v["name"]: v for v in pod_spec(ds)["volumes"]}
        for name, path in DRA_HOST_DIRS.items():
            self.assertEqual(mounts[name], path)
            self.assertEqual(vols[name]["hostPath"]["path"], path)
            self.assertNotIn("readOnly", [k for m in c["volumeMounts"] if m["name"] == name
                                          for k in m])
        for flag in ("--dra-registry-dir", "--dra-plugin-dir", "--dra-driver-name"):
            self.assertEqual(flag_values(c["args"], flag), [], "the defaults are what is mounted")
        binary = os.environ.get("PRISM_BINARY", "")
        if binary and os.access(binary, os.X_OK):
            help_text = subprocess.run([binary, "device-plugin", "--help"], capture_output=True,
                                       text=True).stdout
            self.assertRegex(help_text, r"--dra-registry-dir TEXT=" +
                             re.escape(DRA_HOST_DIRS["kubelet-plugins-registry"]) + r"\s")
            self.assertRegex(help_text, r"--dra-driver-name TEXT=" + re.escape(DRA_DRIVER) + r"\s")
            self.assertIn("/var/lib/kubelet/plugins/<driver name>", help_text)

    def test_device_class_selects_the_agents_devices(self):
        dc = find(self.objects, "DeviceClass", DRA_DRIVER)
        self.assertEqual(dc["apiVersion"], "resource.k8s.io/v1")
        self.assertNotIn("extendedResourceName", dc["spec"])  # KEP-5004 would bypass Prism.
        (selector,) = dc["spec"]["selectors"]
        expression = " ".join(selector["cel"]["expression"].split())
        self.assertTrue(expression.startswith(f"device.driver == '{DRA_DRIVER}' && "), expression)
        self.assertIn(f"device.attributes['{DRA_DRIVER}'].type == 'gpu'", expression)
        policy = find(self.objects, "ValidatingAdmissionPolicy", "prism-node-scoped-resourceslices")
        self.assertIn(f"'{DRA_DRIVER}'", json.dumps(policy["spec"]["validations"]))


class DraOverlay:
    """The overlay examples/dra/ as kubectl renders it, and deploy/ (the RFC 6902 patch needs
    kustomize: skipped without kubectl)."""

    @classmethod
    def setUpClass(cls):
        cls.objects = kubectl_kustomize(DRA_OVERLAY)
        cls.off = kubectl_kustomize(DEPLOY)

    def setUp(self):
        if self.objects is None:
            self.skipTest("kubectl not found: the overlay's RFC 6902 patch needs kustomize")


class DraOverlayTest(DraOverlay, DraOptIn, unittest.TestCase):
    def test_the_default_base_has_no_dra(self):
        for o in self.off:
            self.assertNotIn("resource.k8s.io", json.dumps(o.get("rules", [])), key(o))
        self.assertFalse(dra_parts(self.off))
        args = container(find(self.off, "DaemonSet", "prism-device-plugin"), "device-plugin")["args"]
        self.assertFalse([a for a in args if a.startswith("--dra")])


class DraChartTest(DraOptIn, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.objects = helm_render.render_objects(CHART, {"dra": {"enabled": True}}, namespace=NS)
        cls.off = helm_render.render_objects(CHART, namespace=NS)

    def test_chart_renders_the_overlays_dra_objects(self):
        overlay = kubectl_kustomize(DRA_OVERLAY)
        if overlay is None:
            self.skipTest("kubectl not found: the overlay's RFC 6902 patch needs kustomize")
        mine, theirs = dra_parts(self.objects), dra_parts(overlay)
        self.assertEqual(set(mine), DRA_OBJECTS)
        for k, o in theirs.items():
            for field in ("rules", "roleRef", "subjects", "spec"):
                self.assertEqual(mine[k].get(field), o.get(field), f"{k} {field}")
        # The agent's container and its host directories, as the base comparison does.
        a = find(overlay, "DaemonSet", "prism-device-plugin")
        b = find(self.objects, "DaemonSet", "prism-device-plugin")
        for field in ("args", "volumeMounts"):
            self.assertEqual(container(a, "device-plugin")[field],
                             container(b, "device-plugin")[field], field)
        self.assertEqual([v for v in pod_spec(a)["volumes"] if "hostPath" in v],
                         [v for v in pod_spec(b)["volumes"] if "hostPath" in v])

    def test_variants(self):
        # Without the node agent there is nothing to grant or confine; without the node policy,
        # no ResourceSlice policy either. The DeviceClasses and the scheduler's part stay.
        objs = helm_render.render_objects(CHART, {"dra": {"enabled": True},
                                                  "devicePlugin": {"enabled": False}}, namespace=NS)
        self.assertEqual(set(dra_parts(objs)), DRA_OBJECTS - {
            ("ClusterRole", "prism-device-plugin-dra"),
            ("ClusterRoleBinding", "prism-device-plugin-dra"),
            ("ValidatingAdmissionPolicy", "prism-node-scoped-resourceslices"),
            ("ValidatingAdmissionPolicyBinding", "prism-node-scoped-resourceslices")})
        objs = helm_render.render_objects(CHART, {"dra": {"enabled": True},
                                                  "nodePolicy": {"enabled": False}}, namespace=NS)
        self.assertEqual(set(dra_parts(objs)), DRA_OBJECTS - {
            ("ValidatingAdmissionPolicy", "prism-node-scoped-resourceslices"),
            ("ValidatingAdmissionPolicyBinding", "prism-node-scoped-resourceslices")})
        # The same flag and mounts beside the simulated GPUs.
        on = helm_render.render_objects(CHART, {"dra": {"enabled": True},
                                                "simulation": {"enabled": True}}, namespace=NS)
        off = helm_render.render_objects(CHART, {"simulation": {"enabled": True}}, namespace=NS)
        c_on = container(find(on, "DaemonSet", "prism-device-plugin"), "device-plugin")
        c_off = container(find(off, "DaemonSet", "prism-device-plugin"), "device-plugin")
        self.assertEqual(set(c_on["args"]) - set(c_off["args"]),
                         {"--dra=true", "--dra-consumable-capacity=true"})
        self.assertEqual(len(c_on["volumeMounts"]) - len(c_off["volumeMounts"]), 2)
        # dra.consumableCapacity=false: whole GPUs and MIG partitions only.
        plain = helm_render.render_objects(CHART, {"dra": {"enabled": True,
                                                           "consumableCapacity": False}},
                                           namespace=NS)
        args = container(find(plain, "DaemonSet", "prism-device-plugin"), "device-plugin")["args"]
        self.assertIn("--dra=true", args)
        self.assertNotIn("--dra-consumable-capacity=true", args)


class DraOverlayWiringTest(DraOverlay, Wiring, unittest.TestCase):
    """The shared checks (least-privilege RBAC with the DRA role, flags that exist...) on the
    DRA overlay."""


class DraChartWiringTest(Wiring, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.objects = helm_render.render_objects(CHART, {"dra": {"enabled": True}}, namespace=NS)


# --- HAMi pods under DRA (docs/dra.md, "HAMi pods under DRA"): examples/dra-hami and dra.hamiClaims

DRA_HAMI_OVERLAY = os.path.join(ROOT, "examples", "dra-hami")
DRA_HAMI_OBJECTS = {("ClusterRole", "prism-scheduler-dra-hami"),
                    ("ClusterRoleBinding", "prism-scheduler-dra-hami")}


def hami_parts(objects):
    return {k: o for o in objects if (k := key(o)[:2]) in DRA_HAMI_OBJECTS}


def mutating_side_effects(objects):
    return find(objects, "MutatingWebhookConfiguration", "prism-webhook")["webhooks"][0]["sideEffects"]


class DraHamiTest(unittest.TestCase):
    """The overlay and the chart value add exactly the templates' rights, the scheduler's flag and
    the pod webhook's NoneOnDryRun, and agree with each other."""

    @classmethod
    def setUpClass(cls):
        cls.overlay = kubectl_kustomize(DRA_HAMI_OVERLAY)
        cls.dra = kubectl_kustomize(DRA_OVERLAY)
        cls.chart = helm_render.render_objects(CHART, {"dra": {"enabled": True, "hamiClaims": True}},
                                               namespace=NS)
        cls.chart_dra = helm_render.render_objects(CHART, {"dra": {"enabled": True}}, namespace=NS)

    def check(self, on, off):
        self.assertEqual(set(hami_parts(on)), DRA_HAMI_OBJECTS)
        self.assertFalse(hami_parts(off))
        role = find(on, "ClusterRole", "prism-scheduler-dra-hami")
        self.assertEqual(role["rules"], [{"apiGroups": ["resource.k8s.io"],
                                          "resources": ["resourceclaimtemplates"],
                                          "verbs": ["create", "get"]}])
        binding = find(on, "ClusterRoleBinding", "prism-scheduler-dra-hami")
        self.assertEqual(binding["subjects"], [{"kind": "ServiceAccount", "name": "prism-scheduler",
                                                "namespace": NS}])
        args_on = container(find(on, "Deployment", "prism-scheduler"), "scheduler")["args"]
        args_off = container(find(off, "Deployment", "prism-scheduler"), "scheduler")["args"]
        self.assertEqual([a for a in args_on if a not in args_off], ["--dra-hami-claims"])
        self.assertIn("--dra", args_on)
        self.assertEqual(mutating_side_effects(on), "NoneOnDryRun")
        self.assertEqual(mutating_side_effects(off), "None")

    def test_overlay_adds_exactly_its_parts(self):
        if self.overlay is None:
            self.skipTest("kubectl not found: the overlay's RFC 6902 patch needs kustomize")
        self.check(self.overlay, self.dra)

    def test_chart_value_adds_the_same(self):
        self.check(self.chart, self.chart_dra)
        if self.overlay is None:
            return
        mine, theirs = hami_parts(self.chart), hami_parts(self.overlay)
        for k, o in theirs.items():
            for field in ("rules", "roleRef", "subjects"):
                self.assertEqual(mine[k].get(field), o.get(field), f"{k} {field}")

    def test_off_by_default(self):
        base = helm_render.render_objects(CHART, namespace=NS)
        self.assertFalse(hami_parts(base))
        self.assertEqual(mutating_side_effects(base), "None")


class DraHamiOverlayWiringTest(Wiring, unittest.TestCase):
    """The shared checks on examples/dra-hami."""

    @classmethod
    def setUpClass(cls):
        cls.objects = kubectl_kustomize(DRA_HAMI_OVERLAY)

    def setUp(self):
        if self.objects is None:
            self.skipTest("kubectl not found: the overlay's RFC 6902 patch needs kustomize")


class DraHamiChartWiringTest(Wiring, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.objects = helm_render.render_objects(CHART, {"dra": {"enabled": True, "hamiClaims": True}},
                                                 namespace=NS)


if __name__ == "__main__":
    unittest.main(verbosity=2)
