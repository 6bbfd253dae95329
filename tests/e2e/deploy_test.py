#!/usr/bin/env python3
"""Checks deploy/ (kustomize base) and charts/prism (Helm chart) without a cluster.

- `kubectl kustomize deploy` must render (skipped, with a note, where kubectl is missing: the
  raw files are checked instead);
- the chart renders with tests/e2e/helm_render.py (Helm's template subset the chart uses) for
  the default values and for the optional variants, into exactly the base's objects;
- the wiring holds: kube-scheduler's extender config (verbs, nodeCacheCapable, managedResources
  with ignoredByScheduler, the Service, the CA file it mounts), the webhook's Service and paths,
  the certificate's names and Secret, the device config the scheduler watches, least-privilege
  RBAC (no wildcards, no cluster-admin, exactly the verbs Prism uses), and every flag the
  manifests pass to `prism` exists ($PRISM_BINARY's --help, when the binary is there);
- the MIG manager (`prism mig-manager`): its DaemonSet lands on MIG-capable GPU nodes only, with
  no more host access than it uses, reads the shipped mig-parted ConfigMap (NVIDIA's default,
  byte for byte) through a name-limited Role, and pauses Prism's device plugin only where the
  plugin's DaemonSet honours the pause. mig_manager_deploy_test.py runs the rendered DaemonSet;
- the NetworkPolicies isolate every pod of Prism's for ingress and open each port its pods listen
  on (containerPorts, probe ports) to its intended callers only, with selectors that match the
  pods and namespaces as shipped;
- the DRA opt-in (deploy/dra/ through the overlay examples/dra/, the chart's `dra.enabled`) adds
  exactly its objects and the node agent's flag and two kubelet mounts, the same in both, and
  nothing of it is in the default rendering.
"""
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("PRISM_SOURCE_DIR", os.path.abspath(os.path.join(HERE, "..", "..")))
sys.path.insert(0, HERE)
import helm_render  # noqa: E402

DEPLOY = os.path.join(ROOT, "deploy")
CHART = os.path.join(ROOT, "charts", "prism")
NS = "prism-system"
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
                  "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding", "DeviceClass"}


def kubectl_kustomize(path):
    """`kubectl kustomize path` as objects; None without kubectl. Kustomize (v5.5) does not know
    the admission policies and DeviceClasses are cluster-scoped and gives them the base's
    namespace, which the API server drops (rest.BeforeCreate): dropped here too."""
    kubectl = shutil.which("kubectl")
    if not kubectl:
        return None
    out = subprocess.run([kubectl, "kustomize", path], check=True, capture_output=True,
                         text=True).stdout
    objects = [d for d in yaml.safe_load_all(out) if d]
    for o in objects:
        if o["kind"] in CLUSTER_SCOPED:
            o["metadata"].pop("namespace", None)
    return objects


def kustomize_objects():
    objects = kubectl_kustomize(DEPLOY)
    if objects is not None:
        return objects, True
    # No kubectl: the files as written, with the base's namespace and generated ConfigMaps.
    with open(os.path.join(DEPLOY, "kustomization.yaml")) as f:
        k = yaml.safe_load(f)
    objects = []
    for path in k["resources"]:
        with open(os.path.join(DEPLOY, path)) as f:
            objects += [d for d in yaml.safe_load_all(f) if d]
    for patch in k.get("patches", []):
        with open(os.path.join(DEPLOY, patch["path"])) as f:
            p = yaml.safe_load(f)
        target = find(objects, p["kind"], p["metadata"]["name"])
        _merge_patch(target, p)
    for gen in k.get("configMapGenerator", []):
        data = {}
        for spec in gen["files"]:
            key, path = spec.split("=", 1)
            with open(os.path.join(DEPLOY, path)) as f:
                data[key] = f.read()
        objects.append({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": gen["name"]}, "data": data})
    for o in objects:
        if o["kind"] not in CLUSTER_SCOPED:
            o["metadata"].setdefault("namespace", NS)
    return objects, False


def _merge_patch(target, patch):
    """The part of a strategic merge patch the base uses: maps merge, everything else replaces."""
    for k, v in patch.items():
        if isinstance(v, dict) and isinstance(target.get(k), dict):
            _merge_patch(target[k], v)
        else:
            target[k] = v


def key(o):
    name = re.sub(r"-[0-9a-z]{10}$", "", o["metadata"]["name"])  # Kustomize's hash suffix.
    return (o["kind"], name, o["metadata"].get("namespace"))


def find(objects, kind, name):
    for o in objects:
        if o["kind"] == kind and re.sub(r"-[0-9a-z]{10}$", "", o["metadata"]["name"]) == name:
            return o
    raise AssertionError(f"no {kind} {name}")


def container(workload, name):
    for c in workload["spec"]["template"]["spec"]["containers"]:
        if c["name"] == name:
            return c
    raise AssertionError(f"no container {name} in {workload['metadata']['name']}")


def pod_spec(workload):
    return workload["spec"]["template"]["spec"]


def runs_on(workload, node_labels):
    """Whether the workload's nodeSelector and required node affinity admit a node."""
    spec = pod_spec(workload)
    for k, v in spec.get("nodeSelector", {}).items():
        if node_labels.get(k) != v:
            return False
    required = (spec.get("affinity", {}).get("nodeAffinity", {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if not required:
        return True

    return any(selector_matches({"matchExpressions": t.get("matchExpressions", [])}, node_labels)
               for t in required["nodeSelectorTerms"])


def env_of(c):
    return {e["name"]: e for e in c.get("env", [])}


def flag_values(args, flag):
    return [a.split("=", 1)[1] for a in args if a.startswith(flag + "=")]


def selector_matches(selector, labels):
    """A metav1.LabelSelector against a label map ({} selects everything)."""
    for k, v in selector.get("matchLabels", {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions", []):
        value, op = labels.get(e["key"]), e["operator"]
        if op == "In" and value not in e["values"]:
            return False
        if op == "NotIn" and value in e["values"]:
            return False
        if op == "Exists" and value is None:
            return False
        if op == "DoesNotExist" and value is not None:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise AssertionError(f"operator {op} not understood")
    return True


def listening_ports(workload):
    """{port number: name or None} a workload's pods listen on: declared containerPorts, and the
    ports its probes reach (kube-scheduler declares none)."""
    ports = {}
    for c in pod_spec(workload)["containers"]:
        named = {p["name"]: p["containerPort"] for p in c.get("ports", []) if "name" in p}
        for p in c.get("ports", []):
            ports[p["containerPort"]] = p.get("name")
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            action = c.get(probe, {}).get("httpGet") or c.get(probe, {}).get("tcpSocket")
            if action:
                port = named.get(action["port"], action["port"])
                ports.setdefault(port, action["port"] if isinstance(action["port"], str) else None)
    return ports


def ingress_peers(policies, workload, port, name):
    """Who the NetworkPolicies of the workload's namespace admit to `port`: None for any source,
    else the list of peers; and whether any policy isolates the pods for ingress at all."""
    labels = workload["spec"]["template"]["metadata"]["labels"]
    ns = workload["metadata"].get("namespace")
    isolated, peers = False, []
    for p in policies:
        if p["metadata"].get("namespace") != ns or not selector_matches(p["spec"]["podSelector"], labels):
            continue
        if "Ingress" not in p["spec"].get("policyTypes", ["Ingress"]):
            continue
        isolated = True
        for rule in p["spec"].get("ingress", []):
            if not any(q.get("protocol", "TCP") == "TCP" and q.get("port") in (port, name)
                       for q in rule.get("ports", [{"port": port}])):
                continue
            if "from" not in rule:
                return isolated, None
            peers += rule["from"]
    return isolated, peers


class Wiring:
    """Checks shared by the kustomize base and the chart."""

    objects = []

    def test_kube_scheduler_consults_the_extender_as_designed(self):
        cm = find(self.objects, "ConfigMap", "prism-kube-scheduler-config")
        cfg = yaml.safe_load(cm["data"]["kube-scheduler-config.yaml"])
        self.assertEqual(cfg["kind"], "KubeSchedulerConfiguration")
        self.assertEqual([p["schedulerName"] for p in cfg["profiles"]], ["prism-scheduler"])
        (ext,) = cfg["extenders"]
        self.assertEqual((ext["filterVerb"], ext["prioritizeVerb"], ext["bindVerb"]),
                         ("filter", "prioritize", "bind"))
        # kube-scheduler's own preemption asks Prism (docs/preemption.md, path A).
        self.assertEqual(ext["preemptVerb"], "preempt")
        self.assertTrue(ext["nodeCacheCapable"])
        self.assertTrue(ext["enableHTTPS"])
        self.assertGreaterEqual(ext["weight"], 1)
        self.assertEqual(ext["urlPrefix"], f"https://prism-scheduler.{NS}.svc:443")
        self.assertEqual(ext["tlsConfig"]["serverName"], f"prism-scheduler.{NS}.svc")
        device_cfg = yaml.safe_load(find(self.objects, "ConfigMap", "prism-device-config")
                                    ["data"]["device-config.yaml"])["nvidia"]
        gpu_resources = [device_cfg[field] for field in (
            "resourceCountName", "resourceMemoryName", "resourceMemoryPercentageName",
            "resourceCoreName")]
        if "managedResources" in ext:
            # The extender is consulted for pods naming these, which kube-scheduler ignores.
            managed = {m["name"]: m["ignoredByScheduler"] for m in ext["managedResources"]}
            for r in gpu_resources:
                self.assertIs(managed.get(r), True, r)
        else:
            # DRA (docs/dra.md#deploying): consulted for every pod of the profile (pods whose
            # GPUs are claims name no resource); NodeResourcesFit ignores the GPU resources, and
            # the extender allocates the claims (--dra).
            (fit,) = [p for p in cfg["profiles"][0]["pluginConfig"]
                      if p["name"] == "NodeResourcesFit"]
            for r in gpu_resources:
                self.assertIn(r, fit["args"]["ignoredResources"])
            self.assertIn("--dra", container(find(self.objects, "Deployment", "prism-scheduler"),
                                             "scheduler")["args"])
        # The CA file it verifies the extender with is mounted.
        ks = find(self.objects, "Deployment", "prism-kube-scheduler")
        mounts = {m["mountPath"]: m["name"] for m in container(ks, "kube-scheduler")["volumeMounts"]}
        ca_dir = os.path.dirname(ext["tlsConfig"]["caFile"])
        self.assertIn(ca_dir, mounts)
        vols = {v["name"]: v for v in ks["spec"]["template"]["spec"]["volumes"]}
        self.assertEqual(vols[mounts[ca_dir]]["secret"]["secretName"], "prism-scheduler-tls")
        config_arg = [a for a in container(ks, "kube-scheduler")["command"]
                      if a.startswith("--config=")][0]
        self.assertIn(os.path.dirname(config_arg.split("=", 1)[1]), mounts)

    def test_extender_verbs_take_only_kube_schedulers_client_certificate(self):
        # kube-scheduler's tlsConfig certFile/keyFile -> the Secret its Deployment mounts there ->
        # the Certificate (client auth) filling it -> a CA Issuer of its own -> the Secret the
        # scheduler mounts at --client-ca-file (the certificate only, never the CA's key).
        cfg = yaml.safe_load(find(self.objects, "ConfigMap", "prism-kube-scheduler-config")
                             ["data"]["kube-scheduler-config.yaml"])
        tls = cfg["extenders"][0]["tlsConfig"]
        self.assertEqual(os.path.dirname(tls["certFile"]), os.path.dirname(tls["keyFile"]))

        def mounted_secret(deployment, name, directory):
            mounts = {m["mountPath"]: m["name"] for m in container(deployment, name)["volumeMounts"]}
            self.assertIn(directory, mounts)
            vols = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
            return vols[mounts[directory]]["secret"]

        ks = find(self.objects, "Deployment", "prism-kube-scheduler")
        client_secret = mounted_secret(ks, "kube-scheduler", os.path.dirname(tls["certFile"]))
        certs = {c["spec"]["secretName"]: c for c in self.objects if c["kind"] == "Certificate"}
        client_cert = certs[client_secret["secretName"]]
        self.assertIn("client auth", client_cert["spec"]["usages"])
        issuer = find(self.objects, "Issuer", client_cert["spec"]["issuerRef"]["name"])
        ca_secret = issuer["spec"]["ca"]["secretName"]
        self.assertNotEqual(ca_secret, "prism-ca", "the client CA must be a root of its own")
        self.assertTrue(certs[ca_secret]["spec"]["isCA"])
        sched = find(self.objects, "Deployment", "prism-scheduler")
        args = container(sched, "scheduler")["args"]
        (ca_file,) = [a.split("=", 1)[1] for a in args if a.startswith("--client-ca-file=")]
        ca_mount = mounted_secret(sched, "scheduler", os.path.dirname(ca_file))
        self.assertEqual(ca_mount["secretName"], ca_secret)
        self.assertEqual([i["key"] for i in ca_mount["items"]], ["ca.crt"])
        # The webhook Service reaches the webhook port, the extender Service the verbs' port.
        ports = {p["name"]: p["containerPort"] for p in container(sched, "scheduler")["ports"]}
        flag = lambda f: int([a.split("=", 1)[1] for a in args if a.startswith(f + "=")][0])
        self.assertEqual(ports[find(self.objects, "Service", "prism-webhook")["spec"]["ports"][0]
                               ["targetPort"]], flag("--webhook-port"))
        self.assertEqual(ports[find(self.objects, "Service", "prism-scheduler")["spec"]["ports"][0]
                               ["targetPort"]], flag("--port"))

    def test_services_reach_the_scheduler(self):
        dep = find(self.objects, "Deployment", "prism-scheduler")
        labels = dep["spec"]["template"]["metadata"]["labels"]
        ports = {p["name"] for p in container(dep, "scheduler")["ports"]}
        for name in ("prism-scheduler", "prism-webhook"):
            svc = find(self.objects, "Service", name)
            for k, v in svc["spec"]["selector"].items():
                self.assertEqual(labels.get(k), v, name)
            for p in svc["spec"]["ports"]:
                self.assertIn(p["targetPort"], ports)
        self.assertTrue(find(self.objects, "Service", "prism-webhook")["spec"]
                        ["publishNotReadyAddresses"])
        probe = container(dep, "scheduler")["readinessProbe"]["httpGet"]
        self.assertEqual(probe["path"], "/readyz")

    def test_webhooks_call_the_webhook_service_over_the_certificates_names(self):
        cert = find(self.objects, "Certificate", "prism-scheduler")
        self.assertEqual(cert["spec"]["secretName"], "prism-scheduler-tls")
        for kind, path in (("MutatingWebhookConfiguration", "/mutate"),
                           ("ValidatingWebhookConfiguration", "/validate")):
            cfg = find(self.objects, kind, "prism-webhook")
            self.assertEqual(cfg["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
                             f"{NS}/prism-scheduler")
            hook = cfg["webhooks"][0]  # The slice-limits entry: its own test.
            svc = hook["clientConfig"]["service"]
            self.assertEqual((svc["name"], svc["namespace"], svc["path"]),
                             ("prism-webhook", NS, path))
            self.assertIn(f"prism-webhook.{NS}.svc", cert["spec"]["dnsNames"])
            if kind == "MutatingWebhookConfiguration":
                # It strips Prism's own annotations and device env from tenants' pods at CREATE.
                self.assertEqual(hook["rules"][0]["resources"], ["pods"])
                self.assertEqual(hook["rules"][0]["operations"], ["CREATE"])
                self.check_create_conditions(hook, "gpu-or-prism-annotations-or-device-env")
            else:
                # It also refuses tenants' UPDATEs of them, of the pod or of its status, and
                # ephemeral containers added with device env.
                self.assertEqual(hook["rules"][0]["resources"],
                                 ["pods", "pods/status", "pods/ephemeralcontainers"])
                self.assertEqual(hook["rules"][0]["operations"], ["CREATE", "UPDATE"])
                self.check_owned_annotation_conditions(hook)
                self.check_create_conditions(hook, "prism-relevant")
            # Side effects only where the scheduler creates HAMi pods' claim templates (never for
            # a dry run): examples/dra-hami, dra.hamiClaims.
            hami = any(a == "--dra-hami-claims" for a in container(
                find(self.objects, "Deployment", "prism-scheduler"), "scheduler")["args"])
            self.assertEqual(hook["sideEffects"],
                             "NoneOnDryRun" if hami and kind == "MutatingWebhookConfiguration"
                             else "None")
            self.assertEqual(hook["failurePolicy"], "Fail")  # An outage must not open the door.
            excluded = [e for e in hook["namespaceSelector"]["matchExpressions"]
                        if e["key"] == "kubernetes.io/metadata.name"][0]["values"]
            self.assertIn(NS, excluded)  # Prism's own pods never wait for Prism's webhook.
        self.assertIn(f"prism-scheduler.{NS}.svc", cert["spec"]["dnsNames"])

    def header_names(self, array):
        """The quoted names of `array` in src/extender/webhook.h (kDeviceEnv...)."""
        with open(os.path.join(ROOT, "src", "extender", "webhook.h")) as f:
            header = f.read()
        body = header[header.index(f"{array}[] = {{"):]
        return re.findall(r'"([A-Z_]+)"', body[:body.index("}")])

    def check_create_conditions(self, hook, name):
        """A CREATE is sent for the env names the webhook acts on (src/extender/webhook.h), for
        every resource of the device config's (by their nvidia.com/ prefix) and the owned
        annotations. tests/e2e/node_policy_test.py evaluates the CEL; this checks its lists."""
        expression = {c["name"]: c["expression"] for c in hook["matchConditions"]}[name]
        lists = re.findall(r"e\.name in \[([^\]]*)\]", expression)
        self.assertTrue(lists)
        want = set(self.header_names("kDeviceEnv") + self.header_names("kUngrantedDeviceEnv"))
        self.assertEqual(len(want), 10)
        for names in lists:
            self.assertEqual(set(re.findall(r"'([A-Z_]+)'", names)), want)
        (prefix,) = set(re.findall(r"r\.startsWith\('([^']+)'\)", expression))
        device_cfg = yaml.safe_load(find(self.objects, "ConfigMap", "prism-device-config")
                                    ["data"]["device-config.yaml"])["nvidia"]
        for field in ("resourceCountName", "resourceMemoryName", "resourceMemoryPercentageName",
                      "resourceCoreName"):
            self.assertTrue(device_cfg[field].startswith(prefix), field)

    def test_the_slice_limits_entry_calls_its_own_path_for_labelled_namespaces(self):
        cfg = find(self.objects, "ValidatingWebhookConfiguration", "prism-webhook")
        (hook,) = [w for w in cfg["webhooks"] if w["name"] == "slice-limits.pods.prism.io"]
        svc = hook["clientConfig"]["service"]
        self.assertEqual((svc["name"], svc["namespace"], svc["path"]),
                         ("prism-webhook", NS, "/validate-slice-limits"))
        self.assertEqual((hook["failurePolicy"], hook["sideEffects"]), ("Fail", "None"))
        self.assertEqual(hook["namespaceSelector"],
                         {"matchLabels": {"prism.io/enforce-slice-limits": "true"}})
        conditions = {c["name"]: c["expression"] for c in hook["matchConditions"]}
        for names in re.findall(r"e\.name in \[([^\]]*)\]",
                                conditions["sets-a-slice-limit-switch"]):
            self.assertEqual(set(re.findall(r"'([A-Z_]+)'", names)),
                             set(self.header_names("kSliceLimitEnv")))
        validating = [w for w in cfg["webhooks"] if w["name"] == "validate.pods.prism.io"][0]
        self.assertEqual(conditions["not-prism-node-agent"],
                         {c["name"]: c["expression"] for c in validating["matchConditions"]}
                         ["not-prism-node-agent"])

    def check_owned_annotation_conditions(self, hook):
        """The validating webhook's matchConditions name exactly the annotations the code protects
        (src/config/owned_annotations.h) and exempt exactly the accounts the webhook trusts."""
        with open(os.path.join(ROOT, "src", "config", "owned_annotations.h")) as f:
            header = f.read()
        consts = {}
        for name in ("annotations.h", "allocation_status.h"):
            with open(os.path.join(ROOT, "src", "config", name)) as f:
                consts.update(re.findall(r'inline constexpr char (k\w+)\[\] = "([^"]+)";', f.read()))
        body = header[header.index("kPrismOwnedPodAnnotations"):]
        body = body[body.index("{") + 1:body.index("}")]
        owned = {consts[n] for n in re.findall(r"k\w+", body)}
        self.assertEqual(len(owned), 6)
        conditions = {c["name"]: c["expression"] for c in hook["matchConditions"]}
        changed = conditions["prism-relevant"]
        self.assertEqual(set(re.findall(r"'([a-z.]+/[a-z-]+)'", changed)) - {"nvidia.com/"}, owned)
        self.assertIn("request.operation == 'CREATE' ?", changed)
        exempt = re.findall(r"username != '([^']+)'", conditions["not-prism-node-agent"])
        args = container(find(self.objects, "Deployment", "prism-scheduler"), "scheduler")["args"]
        trusted = [a.split("=", 1)[1] for a in args if a.startswith("--trusted-service-accounts=")]
        self.assertEqual(len(trusted), 1)
        users = [f"system:serviceaccount:{e}" for e in trusted[0].split(",")]
        self.assertEqual(exempt, users)
        # The exempt account is the node agent's, as its DaemonSet runs.
        agent = find(self.objects, "DaemonSet", "prism-device-plugin")["spec"]["template"]["spec"]
        self.assertEqual(users, [f"system:serviceaccount:{NS}:{agent['serviceAccountName']}"])

    def test_scheduler_watches_the_device_config_it_is_given(self):
        dep = find(self.objects, "Deployment", "prism-scheduler")
        args = container(dep, "scheduler")["args"]
        self.assertEqual(args[0], "scheduler")
        cm_arg = [a for a in args if a.startswith("--config-map=")][0]
        find(self.objects, "ConfigMap", cm_arg.split("=", 1)[1])
        self.assertIn("--leader-elect", args)
        with open(os.path.join(ROOT, "src", "config", "data", "hami-device-config-v2.9.yaml")) as f:
            builtin = yaml.safe_load(f)
        shipped = yaml.safe_load(find(self.objects, "ConfigMap", "prism-device-config")
                                 ["data"]["device-config.yaml"])
        self.assertEqual(shipped, builtin)

    def test_rbac_is_least_privilege(self):
        expected = {
            "prism-scheduler": {("", "pods"): {"get", "list", "watch", "delete"},
                                ("", "pods/binding"): {"create"},
                                # Preemption (path B): DisruptionTarget, then the eviction.
                                ("", "pods/status"): {"patch"},
                                ("", "pods/eviction"): {"create"},
                                ("", "nodes"): {"list", "watch"},
                                ("", "events"): {"create", "patch"}},
            # Its own Node by name (get, patch); which Node: prism-node-scoped-writes.
            "prism-device-plugin": {("", "pods"): {"get", "list", "watch", "patch"},
                                    ("", "nodes"): {"get", "patch"},
                                    ("", "events"): {"create", "patch"}},
            # The DRA opt-in only: claims it prepares; its node's slices (which node, driver and
            # pool: prism-node-scoped-resourceslices).
            "prism-device-plugin-dra": {("resource.k8s.io", "resourceclaims"): {"get"},
                                        ("resource.k8s.io", "resourceslices"):
                                            {"list", "create", "update", "delete"}},
            # The DRA opt-in only: claims it charges and allocates (its finalizer, the
            # allocation), templates and its driver's slices (read), the gate it removes.
            "prism-scheduler-dra": {("resource.k8s.io", "resourceclaims"):
                                        {"get", "list", "watch", "update"},
                                    ("resource.k8s.io", "resourceclaims/status"): {"get", "update"},
                                    ("resource.k8s.io", "resourceclaimtemplates"):
                                        {"list", "watch"},
                                    ("resource.k8s.io", "resourceslices"): {"list", "watch"},
                                    ("", "pods"): {"patch"}},
            # HAMi pods under DRA only (examples/dra-hami): the templates its webhook creates.
            "prism-scheduler-dra-hami": {("resource.k8s.io", "resourceclaimtemplates"):
                                             {"create", "get"}},
            # Its own node (informer, reads, label patches); pods on its node (list) and the GPU
            # Operator's validator pods (delete). ConfigMap and Events: the Roles below.
            "prism-mig-manager": {("", "nodes"): {"get", "list", "watch", "patch"},
                                  ("", "pods"): {"list", "delete"}},
        }
        for o in self.objects:
            if o["kind"] in ("ClusterRole", "Role"):
                for rule in o["rules"]:
                    for field in ("verbs", "resources", "apiGroups"):
                        self.assertNotIn("*", rule.get(field, []), o["metadata"]["name"])
            if o["kind"] in ("ClusterRoleBinding", "RoleBinding"):
                self.assertNotIn(o["roleRef"]["name"], ("cluster-admin", "admin", "edit"))
            if o["kind"] == "ClusterRole":
                got = {}
                for rule in o["rules"]:
                    for g in rule["apiGroups"]:
                        for r in rule["resources"]:
                            got.setdefault((g, r), set()).update(rule["verbs"])
                self.assertEqual(got, expected[o["metadata"]["name"]], o["metadata"]["name"])
        role = find(self.objects, "Role", "prism-scheduler")
        lease_updates = [r for r in role["rules"] if "update" in r["verbs"]]
        self.assertEqual(lease_updates[0]["resourceNames"], ["prism-scheduler"])
        # The device config it watches, by name (its informer selects metadata.name).
        (cm_rule,) = [r for r in role["rules"] if r["resources"] == ["configmaps"]]
        cm_arg = [a for a in container(find(self.objects, "Deployment", "prism-scheduler"),
                                       "scheduler")["args"] if a.startswith("--config-map=")][0]
        self.assertEqual((sorted(cm_rule["verbs"]), cm_rule["resourceNames"]),
                         (["list", "watch"], [cm_arg.split("=", 1)[1]]))
        # The MIG manager reads one ConfigMap, by name, and writes Events about Nodes, which
        # live in `default`.
        (cm_rule,) = find(self.objects, "Role", "prism-mig-manager")["rules"]
        self.assertEqual((cm_rule["resources"], sorted(cm_rule["verbs"]), cm_rule["resourceNames"]),
                         (["configmaps"], ["get", "list", "watch"], ["prism-mig-parted-config"]))
        events = find(self.objects, "Role", "prism-mig-manager-events")
        self.assertEqual(events["metadata"]["namespace"], "default")
        (ev_rule,) = events["rules"]
        self.assertEqual((ev_rule["resources"], sorted(ev_rule["verbs"])),
                         (["events"], ["create", "patch"]))
        ds = find(self.objects, "DaemonSet", "prism-mig-manager")
        sa = pod_spec(ds)["serviceAccountName"]
        for kind, name, role_kind in (("ClusterRoleBinding", "prism-mig-manager", "ClusterRole"),
                                      ("RoleBinding", "prism-mig-manager", "Role"),
                                      ("RoleBinding", "prism-mig-manager-events", "Role")):
            b = find(self.objects, kind, name)
            self.assertEqual(b["roleRef"]["kind"], role_kind)
            self.assertEqual(b["subjects"], [{"kind": "ServiceAccount", "name": sa,
                                              "namespace": ds["metadata"]["namespace"]}], name)
        self.assertEqual(find(self.objects, "RoleBinding", "prism-mig-manager")["metadata"]
                         ["namespace"], ds["metadata"]["namespace"])

    def test_every_flag_passed_to_prism_exists(self):
        binary = os.environ.get("PRISM_BINARY", "")
        if not binary or not os.access(binary, os.X_OK):
            self.skipTest("prism binary not built")
        for kind, name, cname in (("Deployment", "prism-scheduler", "scheduler"),
                                  ("DaemonSet", "prism-device-plugin", "device-plugin"),
                                  ("DaemonSet", "prism-mig-manager", "mig-manager")):
            args = container(find(self.objects, kind, name), cname)["args"]
            help_text = subprocess.run([binary, args[0], "--help"], capture_output=True,
                                       text=True).stdout
            for a in args[1:]:
                flag = a.split("=", 1)[0]
                self.assertRegex(help_text, re.escape(flag) + r"\b", f"{name}: {flag}")
        # Every variable the MIG manager is given is one it reads (NVIDIA_*: the container
        # runtime's; POD_NAMESPACE: expanded into another variable).
        c = container(find(self.objects, "DaemonSet", "prism-mig-manager"), "mig-manager")
        help_text = subprocess.run([binary, "mig-manager", "--help"], capture_output=True,
                                   text=True).stdout
        for name in env_of(c):
            if name.startswith("NVIDIA_") or name == "POD_NAMESPACE":
                continue
            self.assertIn(f"Env:{name}", help_text.replace(" ", ""), name)

    def test_mig_manager_runs_on_mig_capable_gpu_nodes_only(self):
        ds = find(self.objects, "DaemonSet", "prism-mig-manager")
        gpu = {"nvidia.com/gpu.present": "true"}
        self.assertTrue(runs_on(ds, gpu))  # No GPU Feature Discovery: it labels the node itself.
        self.assertTrue(runs_on(ds, {**gpu, "nvidia.com/mig.capable": "true"}))
        self.assertTrue(runs_on(ds, {**gpu, "nvidia.com/mig.config": "all-1g.10gb"}))
        self.assertFalse(runs_on(ds, {**gpu, "nvidia.com/mig.capable": "false"}))
        self.assertFalse(runs_on(ds, {"nvidia.com/mig.capable": "true"}))  # Not a GPU node.
        self.assertFalse(runs_on(ds, {}))
        tolerated = {t["key"] for t in pod_spec(ds)["tolerations"]}
        self.assertIn("nvidia.com/gpu", tolerated)
        self.assertEqual(pod_spec(ds)["priorityClassName"], "system-node-critical")

    def test_mig_manager_has_the_host_access_it_uses_and_no_more(self):
        ds = find(self.objects, "DaemonSet", "prism-mig-manager")
        spec = pod_spec(ds)
        (c,) = spec["containers"]
        self.assertEqual(c["securityContext"], {"privileged": True})  # NVML's MIG calls.
        for field in ("hostPID", "hostIPC", "hostNetwork"):
            self.assertFalse(spec.get(field, False), field)
        host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
        self.assertEqual(host_paths, {"host-root": "/"})
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        env = env_of(c)
        # The host root is there for chroot'd host commands only: reboot, host services, CDI.
        self.assertEqual(env["HOST_ROOT_MOUNT"]["value"], mounts["host-root"]["mountPath"])
        for name in ("WITH_REBOOT", "WITH_SHUTDOWN_HOST_GPU_CLIENTS", "CDI_ENABLED"):
            self.assertEqual(env[name]["value"], "false", name)
        self.assertEqual(env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName")
        self.assertEqual(env["MIG_STRATEGY"]["value"], "mixed")

    def test_mig_manager_reads_the_shipped_mig_parted_config(self):
        ds = find(self.objects, "DaemonSet", "prism-mig-manager")
        c = container(ds, "mig-manager")
        env = env_of(c)
        self.assertEqual(env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"],
                         "metadata.namespace")
        ns, name = env["PRISM_MIG_CONFIG_CONFIGMAP"]["value"].split("/")
        self.assertEqual(ns, "$(POD_NAMESPACE)")
        cm = find(self.objects, "ConfigMap", name)
        self.assertEqual(cm["metadata"]["name"], name)  # Read by name: no hash suffix.
        self.assertEqual(cm["metadata"]["namespace"], ds["metadata"]["namespace"])
        with open(os.path.join(ROOT, "data", "mig-parted", "default-mig-parted-config.yaml")) as f:
            nvidia_default = f.read()
        self.assertEqual(cm["data"]["config.yaml"].rstrip("\n"), nvidia_default.rstrip("\n"))
        cfg = yaml.safe_load(cm["data"]["config.yaml"])
        for name in ("all-disabled", "all-1g.10gb", "all-balanced"):
            self.assertIn(name, cfg["mig-configs"])
        # The host GPU clients file is the mounted ConfigMap's key.
        clients_path = env["GPU_CLIENTS_FILE"]["value"]
        mount = [m for m in c["volumeMounts"]
                 if clients_path.startswith(m["mountPath"].rstrip("/") + "/")][0]
        vol = [v for v in pod_spec(ds)["volumes"] if v["name"] == mount["name"]][0]
        clients_cm = find(self.objects, "ConfigMap", re.sub(r"-[0-9a-z]{10}$", "",
                                                            vol["configMap"]["name"]))
        clients = yaml.safe_load(clients_cm["data"][os.path.basename(clients_path)])
        self.assertEqual(clients["version"], "v1")
        self.assertIn("nvidia-dcgm.service", clients["systemd-services"])

    def test_mig_manager_pauses_only_operands_that_honour_the_pause(self):
        c = container(find(self.objects, "DaemonSet", "prism-mig-manager"), "mig-manager")
        for entry in flag_values(c["args"], "--pause-label"):
            label, selector = entry.split("=", 1)
            want = dict(term.split("=", 1) for term in selector.split(","))
            (ds,) = [o for o in self.objects if o["kind"] == "DaemonSet" and
                     all(o["spec"]["template"]["metadata"]["labels"].get(k) == v
                         for k, v in want.items())]
            base = {"nvidia.com/gpu.present": "true", "nvidia.com/mig.capable": "true"}
            self.assertTrue(runs_on(ds, base), "an absent switch means running")
            self.assertFalse(runs_on(ds, {**base, label: "paused-for-mig-change"}))
            self.assertFalse(runs_on(ds, {**base, label: "false"}))
            self.assertTrue(runs_on(ds, {**base, label: "true"}))


    def test_network_policies_admit_each_port_from_its_callers_only(self):
        # Every pod of Prism's is isolated for ingress, and each port it listens on (declared, or
        # reached by a probe; the flags say which port is which) admits exactly its callers:
        # extender verbs from Prism's kube-scheduler, the webhook from any source (the API server
        # is not a pod: deploy/policies/network-policies.yaml), metrics from the metrics
        # namespaces. The kubelet's probes come from the node, which no policy blocks.
        policies = [o for o in self.objects if o["kind"] == "NetworkPolicy"]
        workloads = [o for o in self.objects if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet")]
        self.assertTrue(policies, "no NetworkPolicy shipped")
        for p in policies:
            self.assertEqual(p["metadata"].get("namespace"), NS, p["metadata"]["name"])
            self.assertNotIn("Egress", p["spec"].get("policyTypes", []), "egress stays open")
            for rule in p["spec"].get("ingress", []):
                self.assertIn("ports", rule, f"{p['metadata']['name']}: a rule opening every port")
        deny = [p for p in policies if p["spec"]["podSelector"] == {} and not p["spec"].get("ingress")]
        self.assertEqual(len(deny), 1, "one default-deny ingress policy for the namespace")

        metrics_ns = None
        for p in policies:
            for rule in p["spec"].get("ingress", []):
                for peer in rule.get("from", []):
                    if "namespaceSelector" in peer:
                        metrics_ns = metrics_ns or peer
                        self.assertEqual(peer, metrics_ns, "one metrics namespace selector")
        self.assertIsNotNone(metrics_ns)
        sched = find(self.objects, "Deployment", "prism-scheduler")
        ks = find(self.objects, "Deployment", "prism-kube-scheduler")
        agent = find(self.objects, "DaemonSet", "prism-device-plugin")
        args = container(sched, "scheduler")["args"]
        extender_port, webhook_port, probe_port = (
            int(flag_values(args, f)[0]) for f in ("--port", "--webhook-port", "--probe-port"))
        agent_port = int(flag_values(container(agent, "device-plugin")["args"],
                                     "--metrics-address")[0].rsplit(":", 1)[1])
        want = {
            ("prism-scheduler", extender_port): ["prism-kube-scheduler's pods"],
            ("prism-scheduler", webhook_port): None,
            ("prism-scheduler", probe_port): [metrics_ns],
            ("prism-kube-scheduler", 10259): [metrics_ns],
            ("prism-device-plugin", agent_port): [metrics_ns],
        }
        got = {}
        for w in workloads:
            name = w["metadata"]["name"]
            for port, pname in listening_ports(w).items():
                isolated, peers = ingress_peers(policies, w, port, pname)
                self.assertTrue(isolated, f"{name} is not isolated for ingress")
                # A pod selector alone (no namespaceSelector: the policy's own namespace) that
                # picks Prism's kube-scheduler pods and no other pod of the namespace.
                if peers and list(peers[0]) == ["podSelector"] and [
                        o for o in workloads if selector_matches(
                            peers[0]["podSelector"], o["spec"]["template"]["metadata"]["labels"])
                ] == [ks]:
                    peers = ["prism-kube-scheduler's pods"] + peers[1:]
                got[(name, port)] = peers
            # No pod left open, ports or not (the MIG manager listens on nothing).
            self.assertTrue(ingress_peers(policies, w, 0, None)[0], f"{name} is not isolated")
        self.assertEqual(got, want)
        # Each policy port is one a selected pod listens on (a renamed port would leave the real
        # one closed and the policy open to nothing).
        for p in policies:
            selected = [w for w in workloads if selector_matches(
                p["spec"]["podSelector"], w["spec"]["template"]["metadata"]["labels"])]
            self.assertTrue(selected, p["metadata"]["name"])
            for rule in p["spec"].get("ingress", []):
                for q in rule["ports"]:
                    self.assertTrue(any(q["port"] in listening_ports(w) or q["port"] in
                                        listening_ports(w).values() for w in selected), q)
        # The metrics selector picks the monitoring namespace, not Prism's, the default one or
        # kube-system.
        sel = metrics_ns["namespaceSelector"]
        self.assertNotIn("podSelector", metrics_ns)
        self.assertTrue(selector_matches(sel, {"kubernetes.io/metadata.name": "monitoring"}))
        for other in (NS, "default", "kube-system"):
            self.assertFalse(selector_matches(sel, {"kubernetes.io/metadata.name": other}), other)
        # The Services route to covered ports: the extender's to the kube-scheduler-only port,
        # the webhook's to the webhook port.
        for svc_name, port in (("prism-scheduler", extender_port), ("prism-webhook", webhook_port)):
            svc = find(self.objects, "Service", svc_name)
            named = {p["name"]: p["containerPort"] for p in container(sched, "scheduler")["ports"]}
            targets = [named.get(p["targetPort"], p["targetPort"]) for p in svc["spec"]["ports"]]
            self.assertIn(port, targets, svc_name)


class KustomizeBaseTest(Wiring, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.objects, cls.rendered = kustomize_objects()
        if not cls.rendered:
            print("note: kubectl not found; checked the raw files instead of `kubectl kustomize`")

    def test_namespace_is_marked_for_the_webhook_to_skip(self):
        ns = find(self.objects, "Namespace", NS)
        self.assertEqual(ns["metadata"]["labels"]["prism.io/webhook"], "ignore")
        rb = find(self.objects, "RoleBinding", "prism-kube-scheduler-auth-reader")
        self.assertEqual(rb["metadata"]["namespace"], "kube-system")


class HelmChartTest(Wiring, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.objects = helm_render.render_objects(CHART, namespace=NS)

    def test_chart_renders_the_same_objects_as_the_base(self):
        base, _ = kustomize_objects()
        want = {key(o) for o in base if o["kind"] != "Namespace"}  # helm --create-namespace
        self.assertEqual({key(o) for o in self.objects}, want)
        # Both pause Prism's device plugin during a static layout change, and its DaemonSet
        # honours the pause in both (the same node affinity).
        paused = self.objects
        self.assertEqual(pod_spec(find(base, "DaemonSet", "prism-device-plugin")).get("affinity"),
                         pod_spec(find(self.objects, "DaemonSet", "prism-device-plugin")).get("affinity"))
        for kind, name, cname, chart in (
                ("Deployment", "prism-scheduler", "scheduler", self.objects),
                ("Deployment", "prism-kube-scheduler", "kube-scheduler", self.objects),
                ("DaemonSet", "prism-device-plugin", "device-plugin", self.objects),
                ("DaemonSet", "prism-mig-manager", "mig-manager", paused)):
            a = container(find(base, kind, name), cname)
            b = container(find(chart, kind, name), cname)
            for field in ("args", "command", "env", "ports", "volumeMounts", "securityContext"):
                self.assertEqual(a.get(field), b.get(field), f"{name} {field}")
        for kind, name in (("ClusterRole", "prism-scheduler"), ("Role", "prism-scheduler"),
                           ("ClusterRole", "prism-device-plugin"),
                           ("ClusterRole", "prism-mig-manager"), ("Role", "prism-mig-manager"),
                           ("Role", "prism-mig-manager-events")):
            self.assertEqual(find(base, kind, name)["rules"], find(self.objects, kind, name)["rules"])
        a, b = (pod_spec(find(objs, "DaemonSet", "prism-mig-manager")) for objs in (base, paused))
        for field in ("affinity", "tolerations", "priorityClassName", "runtimeClassName",
                      "terminationGracePeriodSeconds"):
            self.assertEqual(a.get(field), b.get(field), field)
        self.assertEqual([v["hostPath"] for v in a["volumes"] if "hostPath" in v],
                         [v["hostPath"] for v in b["volumes"] if "hostPath" in v])
        kcfg = [yaml.safe_load(find(objs, "ConfigMap", "prism-kube-scheduler-config")["data"]
                               ["kube-scheduler-config.yaml"]) for objs in (base, self.objects)]
        self.assertEqual(kcfg[0], kcfg[1])

    def test_variants(self):
        objs = helm_render.render_objects(CHART, {
            "tls": {"certManager": False, "caBundle": "Q0E="},
            "devicePlugin": {"enabled": False},
            "scheduler": {"leaderElect": False, "extraArgs": ["--threads=128"]},
            "webhook": {"denyPrivileged": False},
            "deviceConfig": "nvidia:\n  deviceSplitCount: 4\n",
        }, namespace="gpu")
        kinds = {o["kind"] for o in objs}
        self.assertNotIn("Certificate", kinds)
        self.assertNotIn("prism-device-plugin",
                         [o["metadata"]["name"] for o in objs if o["kind"] == "DaemonSet"])
        hook = find(objs, "MutatingWebhookConfiguration", "prism-webhook")
        self.assertEqual(hook["webhooks"][0]["clientConfig"]["caBundle"], "Q0E=")
        self.assertNotIn("annotations", hook["metadata"])
        args = container(find(objs, "Deployment", "prism-scheduler"), "scheduler")["args"]
        self.assertNotIn("--leader-elect", args)
        self.assertIn("--threads=128", args)
        self.assertIn("--allow-privileged", args)
        cfg = yaml.safe_load(find(objs, "ConfigMap", "prism-kube-scheduler-config")["data"]
                             ["kube-scheduler-config.yaml"])
        self.assertEqual(cfg["extenders"][0]["urlPrefix"], "https://prism-scheduler.gpu.svc:443")
        dc = yaml.safe_load(find(objs, "ConfigMap", "prism-device-config")["data"]
                            ["device-config.yaml"])
        self.assertEqual(dc["nvidia"]["deviceSplitCount"], 4)

    def test_mig_manager_variants(self):
        objs = helm_render.render_objects(CHART, {"migManager": {"enabled": False}}, namespace=NS)
        self.assertEqual([o["metadata"]["name"] for o in objs if "mig-manager" in
                          o["metadata"]["name"] or "mig-" in o["metadata"]["name"]], [])
        custom = "version: v1\nmig-configs:\n  mine:\n    - devices: all\n      mig-enabled: false\n"
        objs = helm_render.render_objects(CHART, {"migManager": {
            "withReboot": True, "shutdownHostGpuClients": True, "cdiEnabled": True,
            "migStrategy": "single", "config": custom, "extraArgs": ["--force"]}}, namespace=NS)
        c = container(find(objs, "DaemonSet", "prism-mig-manager"), "mig-manager")
        env = env_of(c)
        self.assertEqual((env["WITH_REBOOT"]["value"], env["WITH_SHUTDOWN_HOST_GPU_CLIENTS"]["value"],
                          env["CDI_ENABLED"]["value"], env["MIG_STRATEGY"]["value"]),
                         ("true", "true", "true", "single"))
        self.assertEqual(c["args"], [
            "mig-manager",
            "--pause-label=prism.io/gpu.deploy.device-plugin=app.kubernetes.io/name=prism-device-plugin",
            "--force"])
        cm = find(objs, "ConfigMap", "prism-mig-parted-config")
        self.assertEqual(yaml.safe_load(cm["data"]["config.yaml"]), yaml.safe_load(custom))
        with open(os.path.join(CHART, "files", "default-mig-parted-config.yaml")) as a, \
                open(os.path.join(ROOT, "data", "mig-parted", "default-mig-parted-config.yaml")) as b:
            self.assertEqual(a.read(), b.read())
        with open(os.path.join(CHART, "files", "gpu-clients.yaml")) as a, \
                open(os.path.join(DEPLOY, "mig-manager", "gpu-clients.yaml")) as b:
            self.assertEqual(a.read(), b.read())

    def test_metrics_scrape_config_and_dashboard(self):
        # Defaults: annotated pods, no ServiceMonitor (no CRD needed), no dashboard.
        kinds = {o["kind"] for o in self.objects}
        self.assertNotIn("ServiceMonitor", kinds)
        self.assertNotIn("prism-grafana-dashboard", [o["metadata"]["name"] for o in self.objects])
        base, _ = kustomize_objects()
        for objs in (base, self.objects):
            for kind, name, port in (("Deployment", "prism-scheduler", "9395"),
                                     ("DaemonSet", "prism-device-plugin", "9401")):
                ann = find(objs, kind, name)["spec"]["template"]["metadata"]["annotations"]
                self.assertEqual((ann["prometheus.io/scrape"], ann["prometheus.io/port"],
                                  ann["prometheus.io/path"]), ("true", port, "/metrics"))
        objs = helm_render.render_objects(CHART, {"metrics": {
            "podAnnotations": False,
            "serviceMonitor": {"enabled": True, "interval": "15s",
                               "labels": {"release": "kube-prometheus-stack"}},
            "dashboards": {"enabled": True, "namespace": "monitoring"}}}, namespace=NS)
        self.assertNotIn("annotations",
                         find(objs, "DaemonSet", "prism-device-plugin")["spec"]["template"]["metadata"])
        # Each ServiceMonitor selects a Service of this release that has the port it scrapes,
        # whose selector picks pods exposing that port by name.
        monitors = [o for o in objs if o["kind"] == "ServiceMonitor"]
        self.assertEqual({m["metadata"]["name"] for m in monitors},
                         {"prism-scheduler", "prism-device-plugin"})
        for m in monitors:
            self.assertEqual(m["metadata"]["labels"]["release"], "kube-prometheus-stack")
            ep = m["spec"]["endpoints"][0]
            self.assertEqual((ep["path"], ep["interval"], ep["honorLabels"]), ("/metrics", "15s", True))
            self.assertEqual(m["spec"]["namespaceSelector"]["matchNames"], [NS])
            want = m["spec"]["selector"]["matchLabels"]
            services = [o for o in objs if o["kind"] == "Service"
                        and all(o["metadata"].get("labels", {}).get(k) == v for k, v in want.items())
                        and ep["port"] in [p["name"] for p in o["spec"]["ports"]]]
            self.assertEqual(len(services), 1, m["metadata"]["name"])
            svc = services[0]
            workload = next(o for o in objs if o["kind"] in ("Deployment", "DaemonSet") and all(
                o["spec"]["template"]["metadata"]["labels"].get(k) == v
                for k, v in svc["spec"]["selector"].items()))
            target = next(p["targetPort"] for p in svc["spec"]["ports"] if p["name"] == ep["port"])
            ports = [p["name"] for c in pod_spec(workload)["containers"] for p in c.get("ports", [])]
            self.assertIn(target, ports)
        cm = find(objs, "ConfigMap", "prism-grafana-dashboard")
        self.assertEqual(cm["metadata"]["namespace"], "monitoring")
        self.assertEqual(cm["metadata"]["labels"]["grafana_dashboard"], "1")
        with open(os.path.join(CHART, "dashboards", "prism.json")) as f:
            self.assertEqual(json.loads(cm["data"]["prism.json"]), json.load(f))

    def test_network_policy_variants(self):
        # The default chart ships the base's policies, spec for spec.
        base, _ = kustomize_objects()
        for p in (o for o in base if o["kind"] == "NetworkPolicy"):
            self.assertEqual(find(self.objects, "NetworkPolicy", p["metadata"]["name"])["spec"],
                             p["spec"], p["metadata"]["name"])
        objs = helm_render.render_objects(CHART, {"networkPolicy": {"enabled": False}}, namespace=NS)
        self.assertNotIn("NetworkPolicy", {o["kind"] for o in objs})
        sel = {"matchLabels": {"prism.io/metrics-scraper": "true"}}
        cidr = [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
        objs = helm_render.render_objects(CHART, {"networkPolicy": {
            "metricsNamespaceSelector": sel, "webhookFrom": cidr}}, namespace="gpu")
        policies = [o for o in objs if o["kind"] == "NetworkPolicy"]
        sched = find(objs, "Deployment", "prism-scheduler")
        self.assertEqual(ingress_peers(policies, sched, 9443, "webhook"), (True, cidr))
        self.assertEqual(ingress_peers(policies, sched, 9395, "metrics"),
                         (True, [{"namespaceSelector": sel}]))
        self.assertEqual(ingress_peers(policies, find(objs, "DaemonSet", "prism-device-plugin"),
                                       9401, "metrics"), (True, [{"namespaceSelector": sel}]))
        self.assertEqual({p["metadata"]["namespace"] for p in policies}, {"gpu"})
        objs = helm_render.render_objects(CHART, {"networkPolicy": {"metricsNamespace": "obs"}},
                                          namespace=NS)
        self.assertEqual(ingress_peers([o for o in objs if o["kind"] == "NetworkPolicy"],
                                       find(objs, "Deployment", "prism-kube-scheduler"), 10259, None),
                         (True, [{"namespaceSelector": {"matchLabels": {
                             "kubernetes.io/metadata.name": "obs"}}}]))

    def test_renderer_refuses_what_it_does_not_understand(self):
        with self.assertRaises(helm_render.TemplateError):
            helm_render._parse(helm_render._tokenize("{{ range .Values.x }}{{ end }}", "t"), "t")
        r = helm_render.Renderer(CHART, {"a": 1}, NS)
        with self.assertRaises(helm_render.TemplateError):
            r._eval(".Values.missing", "t")
        with self.assertRaises(helm_render.TemplateError):
            r._eval("lower .Values.a", "t")


if __name__ == "__main__":
    unittest.main(verbosity=2)
