#!/usr/bin/env python3
"""Runs `prism mig-manager` as the shipped kustomize base deploys it, through a label change.

The DaemonSet's container is taken from the rendered base (`kubectl kustomize deploy`, or the raw
files where kubectl is missing: deploy_test.kustomize_objects) and run the way the kubelet would:
its args, its env with the downward API and $(VAR) references resolved, and its volumes (the
ConfigMaps' keys as files, the host root as an empty directory) at the paths it names. Only two
things are added, standing in for what a node provides: --kubeconfig (the service account) points
at the fake API server (testing/fake_apiserver, seeded with the base's mig-parted ConfigMap), and
--nvml=sim:<file> gives it a simulated H100 instead of the driver.

A stand-in DaemonSet controller runs Prism's device plugin from the base's own DaemonSet (its
nodeSelector and affinity against the node's labels). Then:
  - label the node nvidia.com/mig.config=all-1g.10gb and see nvidia.com/mig.config.state go to
    `success` with seven 1g.10gb instances on the GPU, the device plugin paused and back, the GPU
    Operator's validator pod re-run, feature labels written;
  - remove the label: the state stays, the GPUs stay;
  - every API request the manager made is allowed by the base's RBAC for its service account, and
    the RBAC grants nothing it did not use (but Event patches, made only for repeated Events).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import deploy_test  # noqa: E402
from deploy_test import container, find, pod_spec, runs_on  # noqa: E402

NODE = "node-1"
TEST_TAG = "fieldManager=mig-manager-deploy-test"  # Marks this test's own API requests.
PAUSED = "paused-for-mig-change"


def binary(var):
    path = os.environ.get(var, "")
    return path if path and os.access(path, os.X_OK) else None


class Api:
    """A small client for the fake API server (plain HTTP, no auth)."""

    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"

    def call(self, method, path, body=None, content_type="application/json", tag=True):
        url = self.base + path
        if tag:
            url += ("&" if "?" in url else "?") + TEST_TAG
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": content_type})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def node(self):
        return self.call("GET", f"/api/v1/nodes/{NODE}")

    def labels(self):
        return self.node()["metadata"].get("labels", {})

    def set_label(self, key, value):
        self.call("PATCH", f"/api/v1/nodes/{NODE}", {"metadata": {"labels": {key: value}}},
                  "application/merge-patch+json")

    def requests(self):
        return self.call("GET", "/_fake/requests", tag=False)


class DaemonSetController(threading.Thread):
    """Runs one DaemonSet's pod on NODE while the node's labels admit it; records what it did."""

    def __init__(self, api, ds):
        super().__init__(daemon=True)
        self.api, self.ds = api, ds
        self.ns = ds["metadata"]["namespace"]
        self.pod_name = f"{ds['metadata']['name']}-{NODE}"
        self.log = []
        self.stop = threading.Event()

    def sync(self):
        labels = self.api.labels()
        path = f"/api/v1/namespaces/{self.ns}/pods"
        exists = self.api.call("GET", f"{path}/{self.pod_name}") is not None
        want = runs_on(self.ds, labels)
        if want and not exists:
            spec = pod_spec(self.ds)
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": self.pod_name, "namespace": self.ns,
                                "labels": self.ds["spec"]["template"]["metadata"]["labels"]},
                   # As the real controller: the template's nodeSelector, and a required
                   # affinity reduced to this node.
                   "spec": {"nodeName": NODE, "nodeSelector": spec.get("nodeSelector", {}),
                            "affinity": {"nodeAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": {
                                    "nodeSelectorTerms": [{"matchFields": [
                                        {"key": "metadata.name", "operator": "In",
                                         "values": [NODE]}]}]}}},
                            "containers": [{"name": c["name"], "image": "prism"}
                                           for c in spec["containers"]]}}
            self.api.call("POST", path, pod)
            self.log.append("create")
        elif exists and not want:
            self.api.call("DELETE", f"{path}/{self.pod_name}")
            self.log.append("delete")

    def run(self):
        while not self.stop.is_set():
            self.sync()
            time.sleep(0.05)


def resolve_env(c, pod_namespace):
    """The container's environment as the kubelet builds it (downward API, $(VAR) expansion)."""
    env = {}
    for e in c.get("env", []):
        if "valueFrom" in e:
            field = e["valueFrom"]["fieldRef"]["fieldPath"]
            env[e["name"]] = {"spec.nodeName": NODE, "metadata.namespace": pod_namespace}[field]
        else:
            env[e["name"]] = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                                    lambda m: env.get(m.group(1), m.group(0)), e["value"])
    return env


def allowed(request, grants):
    """Whether RBAC `grants` [(namespace or None, rule)] allow a logged API request."""
    path = request["path"]
    query = urllib.parse.parse_qs(request["query"])
    m = re.fullmatch(r"/api/v1(?:/namespaces/([^/]+))?/([^/]+)(?:/([^/]+))?", path)
    if not m:
        return False
    ns, resource, name = m.groups()
    method = request["method"]
    if method == "GET":
        verb = "get" if name else ("watch" if request["watch"] else "list")
    else:
        verb = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}[method]
    if verb in ("list", "watch"):
        for term in query.get("fieldSelector", [""])[0].split(","):
            if term.startswith("metadata.name="):
                name = term.split("=", 1)[1]
    for grant_ns, rule in grants:
        if grant_ns is not None and grant_ns != ns:
            continue
        if "" not in rule["apiGroups"] or resource not in rule["resources"]:
            continue
        if verb not in rule["verbs"]:
            continue
        if rule.get("resourceNames") and (verb == "create" or name not in rule["resourceNames"]):
            continue
        return (resource, verb)
    return None


@unittest.skipUnless(binary("PRISM_BINARY") and binary("FAKE_APISERVER_BINARY"),
                     "prism or fake_apiserver not built")
class RenderedMigManagerTest(unittest.TestCase):
    def setUp(self):
        self.objects, _ = deploy_test.kustomize_objects()
        self.ds = find(self.objects, "DaemonSet", "prism-mig-manager")
        self.dir = tempfile.mkdtemp(prefix="prism-mmdeploy-")
        self.procs = []
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.addCleanup(self.stop_all)

        # The cluster: the node (a GPU node as GPU Feature Discovery would label it, minus
        # nvidia.com/mig.capable, which the manager writes), the base's ConfigMaps, and the GPU
        # Operator's validator pod on the node.
        ns = self.ds["metadata"]["namespace"]
        seed = [{"apiVersion": "v1", "kind": "Node",
                 "metadata": {"name": NODE, "labels": {"nvidia.com/gpu.present": "true",
                                                       "kubernetes.io/hostname": NODE}}},
                {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": "nvidia-operator-validator-x", "namespace": "gpu-operator",
                              "labels": {"app": "nvidia-operator-validator"}},
                 "spec": {"nodeName": NODE, "containers": [{"name": "v", "image": "v"}]}}]
        seed += [o for o in self.objects if o["kind"] == "ConfigMap" and
                 o["metadata"]["namespace"] == ns]
        with open(os.path.join(self.dir, "seed.json"), "w") as f:
            json.dump(seed, f)
        kubeconfig = os.path.join(self.dir, "kubeconfig")
        api = subprocess.Popen([binary("FAKE_APISERVER_BINARY"), "--port", "0", "--print-port",
                                "--kubeconfig-out", kubeconfig, "--seed",
                                os.path.join(self.dir, "seed.json")],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.procs.append(api)
        self.api = Api(int(api.stdout.readline()))
        self.kubeconfig = kubeconfig
        with open(os.path.join(self.dir, "gpus.yaml"), "w") as f:
            f.write("gpus:\n  - model: H100-SXM5-80GB\n")

    def stop_all(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

    def start_manager(self):
        """Starts the container of the rendered DaemonSet as the kubelet would."""
        c = container(self.ds, "mig-manager")
        env = resolve_env(c, self.ds["metadata"]["namespace"])
        volumes = {v["name"]: v for v in pod_spec(self.ds)["volumes"]}
        paths = {}  # mountPath -> directory here
        for m in c.get("volumeMounts", []):
            local = os.path.join(self.dir, "mounts", m["name"])
            os.makedirs(local, exist_ok=True)
            v = volumes[m["name"]]
            if "configMap" in v:
                name = re.sub(r"-[0-9a-z]{10}$", "", v["configMap"]["name"])
                for key, text in find(self.objects, "ConfigMap", name)["data"].items():
                    with open(os.path.join(local, key), "w") as f:
                        f.write(text)
            else:
                self.assertEqual(v["hostPath"]["path"], "/")  # An empty stand-in for the host.
            paths[m["mountPath"].rstrip("/")] = local

        def relocate(value):
            for mount, local in paths.items():
                if value == mount or value.startswith(mount + "/"):
                    return local + value[len(mount):]
            return value

        env = {k: relocate(v) for k, v in env.items()}
        env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
        args = [relocate(a) for a in c["args"]]
        self.log_path = os.path.join(self.dir, "manager.log")
        log = open(self.log_path, "w")
        self.addCleanup(log.close)
        p = subprocess.Popen([binary("PRISM_BINARY"), "--log-level=debug"] + args +
                             [f"--kubeconfig={self.kubeconfig}",
                              f"--nvml=sim:{os.path.join(self.dir, 'gpus.yaml')}"],
                             env=env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def manager_log(self):
        with open(self.log_path) as f:
            return f.read()

    def eventually(self, condition, what, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if condition():
                return
            time.sleep(0.05)
        self.fail(f"timed out waiting for {what}\n--- manager log ---\n{self.manager_log()}")

    def attempts(self):
        return self.manager_log().count("Attempt finished")

    def gpu_profiles(self):
        with open(os.path.join(self.dir, "gpus.yaml")) as f:
            state = yaml.safe_load(f)
        return sorted(gi["profile"] for gi in state["gpus"][0].get("gpu_instances", []))

    def test_label_change_to_success_with_the_rendered_daemonset(self):
        labels = self.api.labels()
        self.assertTrue(runs_on(self.ds, labels), "the DaemonSet would not run on a GPU node")
        plugin = DaemonSetController(self.api, find(self.objects, "DaemonSet",
                                                    "prism-device-plugin"))
        plugin.sync()
        self.assertEqual(plugin.log, ["create"])
        plugin.start()
        self.addCleanup(plugin.join)
        self.addCleanup(plugin.stop.set)

        manager = self.start_manager()
        self.eventually(lambda: self.attempts() >= 1, "the first attempt")
        self.assertIn("Attempt finished: no-config", self.manager_log())
        self.assertEqual(self.gpu_profiles(), [])  # No label: GPUs untouched.
        self.assertEqual(self.api.labels().get("nvidia.com/mig.capable"), "true")
        self.assertTrue(runs_on(self.ds, self.api.labels()))  # Still after labelling itself.

        self.api.set_label("nvidia.com/mig.config", "all-1g.10gb")
        self.eventually(lambda: self.api.labels().get("nvidia.com/mig.config.state") == "success",
                        "nvidia.com/mig.config.state=success")
        labels = self.api.labels()
        self.assertEqual(self.gpu_profiles(), ["1g.10gb"] * 7)
        self.assertEqual(labels.get("nvidia.com/mig-1g.10gb.count"), "7")
        self.assertEqual(labels.get("nvidia.com/mig.strategy"), "mixed")
        self.assertNotIn("prism.io/gpu.deploy.device-plugin", labels)
        self.assertNotIn("prism.io/mig-manager.in-flight", self.api.node()["metadata"]
                         .get("annotations", {}))
        # Prism's device plugin left while the GPUs changed and came back.
        self.eventually(lambda: plugin.log == ["create", "delete", "create"],
                        "the device plugin to come back")
        self.assertIsNone(self.api.call("GET", "/api/v1/namespaces/gpu-operator/pods/"
                                               "nvidia-operator-validator-x"))
        log = self.manager_log()
        for step in ("ConfigMap prism-system/prism-mig-parted-config key config.yaml",
                     "Changing the 'nvidia.com/mig.config.state' node label to 'pending'",
                     "MIG configuration applied successfully"):
            self.assertIn(step, log)

        # Handing the node back: the state and the GPUs stay.
        before = self.attempts()
        self.api.set_label("nvidia.com/mig.config", None)
        self.eventually(lambda: self.attempts() > before, "the attempt after removing the label")
        self.assertEqual(self.api.labels().get("nvidia.com/mig.config.state"), "success")
        self.assertEqual(self.gpu_profiles(), ["1g.10gb"] * 7)

        manager.send_signal(signal.SIGTERM)
        self.assertEqual(manager.wait(timeout=30), 0)

        # Every request it made is one its service account may make, and every grant but
        # Event patches was needed.
        sa = pod_spec(self.ds)["serviceAccountName"]
        sa_ns = self.ds["metadata"]["namespace"]
        grants = []
        for b in self.objects:
            if b["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
                continue
            if {"kind": "ServiceAccount", "name": sa, "namespace": sa_ns} not in b["subjects"]:
                continue
            role = find(self.objects, b["roleRef"]["kind"], b["roleRef"]["name"])
            scope = None if b["kind"] == "ClusterRoleBinding" else b["metadata"]["namespace"]
            grants += [(scope, r) for r in role["rules"]]
        used = set()
        for r in self.api.requests():
            if TEST_TAG in r["query"]:
                continue
            got = allowed(r, grants)
            self.assertTrue(got, f"RBAC forbids {r['method']} {r['path']}?{r['query']}")
            used.add(got)
        granted = {(res, verb) for _, rule in grants for res in rule["resources"]
                   for verb in rule["verbs"]}
        self.assertLessEqual(granted - used, {("events", "patch")})


if __name__ == "__main__":
    unittest.main(verbosity=2)
