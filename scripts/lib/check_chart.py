#!/usr/bin/env python3
# Assertions on what the Helm chart deploy/helm/gpu-vk renders, run by scripts/lint-chart:
#   check_chart.py DEFAULT.yaml CREDENTIALS.yaml CREDENTIALS-VALUES.yaml EXISTING.yaml HA.yaml OVERFLOW.yaml OVERFLOW-CLASSES.yaml
# (`helm template` output with the default values, with ci/credentials-values.yaml, that values
# file itself, the output with ci/existing-secret-values.yaml, and with ci/ha-values.yaml: two
# replicas electing a leader, and with ci/overflow-values.yaml: the overflow companion, also with
# research PriorityClasses). Needs
# PyYAML (python3-yaml).
"""Checks the security settings, probes, credential handling and RBAC of the rendered chart."""

import base64
import sys

import yaml

SECRET_DIR = "/var/run/secrets/gpu-vk"

# Least privilege, changed only on purpose: (apiGroups, resources, verbs, resourceNames), with
# NODE standing for config.nodeName. Its own Node and node Leases by name; a create carries no
# name RBAC could check, so it is a rule of its own.
CLUSTER_RULES = [
    ([""], ["nodes"], ["get", "list", "watch", "patch", "update"], ["NODE"]),
    ([""], ["nodes"], ["create"], None),
    ([""], ["nodes/status"], ["get", "patch", "update"], ["NODE"]),
    # The cluster's own networks (every Node's pod ranges and addresses, the ServiceCIDRs).
    ([""], ["nodes"], ["list"], None),
    (["networking.k8s.io"], ["servicecidrs"], ["list"], None),
    ([""], ["pods"], ["get", "list", "watch", "patch", "delete"], None),
    ([""], ["pods/status"], ["get", "patch", "update"], None),
    ([""], ["configmaps", "secrets"], ["get"], None),
    ([""], ["services"], ["get", "list", "watch"], None),
    (["discovery.k8s.io"], ["endpointslices"], ["get", "list", "watch", "create", "patch", "update", "delete"], None),
    (["events.k8s.io"], ["events"], ["create", "patch"], None),
    ([""], ["events"], ["create", "patch"], None),
    (["authentication.k8s.io"], ["tokenreviews"], ["create"], None),
    (["authorization.k8s.io"], ["subjectaccessreviews"], ["create"], None),
    (["certificates.k8s.io"], ["certificatesigningrequests"], ["create", "get", "list", "watch"], None),
    # The admission check's own ValidatingWebhookConfiguration.
    (["admissionregistration.k8s.io"], ["validatingwebhookconfigurations"], ["get", "create", "patch", "update"], ["gpu-vk-NODE"]),
]
# With config.allowedNamespaces, Secrets and ConfigMaps are read, and the Services and
# EndpointSlices of offloaded pods read and written, through a Role in each of them.
ENV_RULES = [
    ([""], ["configmaps", "secrets"], ["get"], None),
    ([""], ["services"], ["get", "list", "watch"], None),
    (["discovery.k8s.io"], ["endpointslices"], ["get", "list", "watch", "create", "patch", "update", "delete"], None),
]
LEASE_RULES = [
    (["coordination.k8s.io"], ["leases"], ["get", "patch", "update"], ["NODE", "gpu-vk-leader-NODE"]),
    (["coordination.k8s.io"], ["leases"], ["create"], None),
]
# Reading the kubelet Service's address: that one Service only (resourceNames checked below).
ADDRESS_RULES = [([""], ["services"], ["get"], "SERVICE")]

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def load(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def one(docs, kind, case):
    found = [d for d in docs if d.get("kind") == kind]
    check(len(found) == 1, f"{case}: expected one {kind}, found {len(found)}")
    return found[0] if found else {}


def rules(role):
    return [(r.get("apiGroups"), r.get("resources"), r.get("verbs"), r.get("resourceNames")) for r in role.get("rules", [])]


def expect(want, node, service=None):
    """The expected rules with NODE and SERVICE filled in."""
    def names(n):
        if n == "SERVICE":
            return [service]
        return [x.replace("NODE", node) for x in n] if n else None
    return [(g, r, v, names(n)) for g, r, v, n in want]


def check_rbac(docs, case, sa_name, namespace, allowed=()):
    config = yaml.safe_load(one(docs, "ConfigMap", case).get("data", {}).get("config.yaml", "")) or {}
    node = config.get("nodeName", "")
    cluster_role = one(docs, "ClusterRole", case)
    want = [r for r in CLUSTER_RULES if not (allowed and r in ENV_RULES)]
    if allowed:
        # Whether the allowed namespaces exist (a warning at start), by name.
        want.insert(want.index(([""], ["pods/status"], ["get", "patch", "update"], None)) + 1,
                    ([""], ["namespaces"], ["get"], list(allowed)))
    check(rules(cluster_role) == expect(want, node), f"{case}: ClusterRole rules differ from the least-privilege set: {rules(cluster_role)}")
    roles = {}
    for d in docs:
        if d.get("kind") == "Role":
            roles.setdefault(d["metadata"]["name"].rsplit("-", 1)[-1], []).append(d)
    check(sorted(roles) == sorted(["address", "lease"] + (["env"] if allowed else [])),
          f"{case}: expected the Roles *-lease, *-address{' and *-env' if allowed else ''}, found {sorted(roles)}")
    lease = (roles.get("lease") or [{}])[0]
    check(lease.get("metadata", {}).get("namespace") == "kube-node-lease", f"{case}: the lease Role is not in kube-node-lease")
    check(rules(lease) == expect(LEASE_RULES, node), f"{case}: lease Role rules differ: {rules(lease)}")
    services = [d["metadata"]["name"] for d in docs if d.get("kind") == "Service" and d["metadata"]["name"].endswith("-kubelet")]
    address = (roles.get("address") or [{}])[0]
    check(len(services) == 1 and rules(address) == expect(ADDRESS_RULES, node, services[0] if services else None),
          f"{case}: the address Role is not limited to the kubelet Service {services}: {rules(address)}")
    env = roles.get("env", [])
    check(sorted(r["metadata"].get("namespace") for r in env) == sorted(allowed),
          f"{case}: the Secret-reading Roles are in {[r['metadata'].get('namespace') for r in env]}, not {sorted(allowed)}")
    for r in env:
        check(rules(r) == ENV_RULES, f"{case}: env Role in {r['metadata'].get('namespace')} has {rules(r)}")
    bindings = [d for d in docs if d.get("kind") in ("ClusterRoleBinding", "RoleBinding")]
    check(len(bindings) == 4 + len(allowed), f"{case}: expected {4 + len(allowed)} bindings, found {len(bindings)}")
    auth_reader = [b for b in bindings if b["roleRef"]["name"] == "extension-apiserver-authentication-reader"]
    check(len(auth_reader) == 1 and auth_reader[0]["metadata"].get("namespace") == "kube-system",
          f"{case}: no kube-system binding to extension-apiserver-authentication-reader")
    for b in bindings:
        want_subject = [{"kind": "ServiceAccount", "name": sa_name, "namespace": namespace}]
        check(b.get("subjects") == want_subject, f"{case}: {b['kind']} {b['metadata']['name']} binds {b.get('subjects')}, not {want_subject}")
    check_pod_write_policy(docs, case, sa_name, namespace, node)


def named(docs, kind, suffix, case):
    """The one object of `kind` whose name ends with `suffix`."""
    found = [d for d in docs if d.get("kind") == kind and d["metadata"]["name"].endswith(suffix)]
    check(len(found) == 1, f"{case}: expected one {kind} named *{suffix}, found {len(found)}")
    return found[0] if found else {}


def check_policy_start(docs, case, suffix, what):
    """The ValidatingAdmissionPolicy named *suffix: failing closed, and bound with Deny. Returns it."""
    policy = named(docs, "ValidatingAdmissionPolicy", suffix, case)
    check(policy.get("spec", {}).get("failurePolicy") == "Fail", f"{case}: the {what} does not fail closed")
    binding = named(docs, "ValidatingAdmissionPolicyBinding", suffix, case).get("spec", {})
    check(binding.get("policyName") == policy.get("metadata", {}).get("name") and binding.get("validationActions") == ["Deny"],
          f"{case}: the {what} is not bound with Deny: {binding}")
    return policy


# The annotations only the VK writes (vk/src/pods/spec.rs; a vk test checks the same list).
OWNED_ANNOTATIONS = ["gpu-vk.io/published-ports", "gpu-vk.io/assigned-provider", "gpu-vk.io/dispatch", "gpu-vk.io/start-attempts",
                     "gpu-vk.io/pull-failures"]


def check_annotation_policy(docs, case, sa_name, namespace, node):
    """The ValidatingAdmissionPolicy that keeps the VK's own pod annotations its own."""
    policy = check_policy_start(docs, case, "-owned-annotations", "annotation policy")
    spec = policy.get("spec", {})
    rule = (spec.get("matchConstraints", {}).get("resourceRules") or [{}])[0]
    check(sorted(rule.get("operations", [])) == ["CREATE", "UPDATE"] and sorted(rule.get("resources", [])) == ["pods", "pods/status"],
          f"{case}: the annotation policy does not match pod creates and updates: {rule}")
    user = f"system:serviceaccount:{namespace}:{sa_name}"
    conditions = [c.get("expression", "") for c in spec.get("matchConditions", [])]
    check(len(conditions) == 2 and conditions[0] == f"request.userInfo.username != '{user}'" and f"object.spec.nodeName == '{node}'" in conditions[1],
          f"{case}: the annotation policy does not exempt exactly {user} on node {node}: {conditions}")
    variables = {v["name"]: v["expression"] for v in spec.get("variables", [])}
    owned = yaml.safe_load(variables.get("owned", "[]"))
    check(owned == OWNED_ANNOTATIONS, f"{case}: the annotation policy protects {owned}, not {OWNED_ANNOTATIONS}")
    check([v.get("expression") for v in spec.get("validations", [])] == ["variables.changed.size() == 0"],
          f"{case}: the annotation policy's validation changed: {spec.get('validations')}")


def check_vk_write_policy(docs, case, sa_name, namespace):
    """The ValidatingAdmissionPolicy that pins the VK's webhook configuration and EndpointSlices."""
    policy = check_policy_start(docs, case, "-vk-writes", "VK write policy")
    spec = policy.get("spec", {})
    resources = sorted(r for rule in spec.get("matchConstraints", {}).get("resourceRules", []) for r in rule.get("resources", []))
    check(resources == ["endpointslices", "validatingwebhookconfigurations"], f"{case}: the VK write policy matches {resources}")
    user = f"system:serviceaccount:{namespace}:{sa_name}"
    conditions = [c.get("expression", "") for c in spec.get("matchConditions", [])]
    check(conditions == [f"request.userInfo.username == '{user}'"], f"{case}: the VK write policy is not limited to {user}: {conditions}")
    text = " ".join(v.get("expression", "") for v in spec.get("validations", []))
    for must in ["w.failurePolicy == 'Ignore'", "!has(w.clientConfig.url)", "r.resources == ['pods']", "request.namespace != 'kube-system'", "'gpu-vk.io'"]:
        check(must in text, f"{case}: the VK write policy no longer checks {must}")


def check_pod_write_policy(docs, case, sa_name, namespace, node):
    """The ValidatingAdmissionPolicy that keeps the VK's pod writes to its own node's pods."""
    check_annotation_policy(docs, case, sa_name, namespace, node)
    check_vk_write_policy(docs, case, sa_name, namespace)
    policy = check_policy_start(docs, case, "-pod-writes", "pod-write policy")
    spec = policy.get("spec", {})
    rule = (spec.get("matchConstraints", {}).get("resourceRules") or [{}])[0]
    check(sorted(rule.get("operations", [])) == ["DELETE", "UPDATE"] and sorted(rule.get("resources", [])) == ["pods", "pods/status"],
          f"{case}: the pod-write policy does not match pod and status updates and deletes: {rule}")
    user = f"system:serviceaccount:{namespace}:{sa_name}"
    conditions = [c.get("expression", "") for c in spec.get("matchConditions", [])]
    check(conditions == [f"request.userInfo.username == '{user}'"], f"{case}: the pod-write policy is not limited to {user}: {conditions}")
    variables = {v["name"]: v["expression"] for v in spec.get("variables", [])}
    check(f"oldObject.spec.nodeName == '{node}'" in variables.get("bound", ""), f"{case}: the pod-write policy does not check the node {node}")
    check([v.get("expression") for v in spec.get("validations", [])] == ["variables.bound || variables.own"],
          f"{case}: the pod-write policy's validation changed: {spec.get('validations')}")


def check_deployment(docs, case, secret_name, sa_name):
    dep = one(docs, "Deployment", case)
    spec = dep.get("spec", {})
    pod = spec.get("template", {}).get("spec", {})
    check(spec.get("strategy") == {"type": "Recreate"}, f"{case}: strategy is not Recreate")
    check(pod.get("serviceAccountName") == sa_name, f"{case}: serviceAccountName {pod.get('serviceAccountName')} is not {sa_name}")
    psc = pod.get("securityContext", {})
    check(psc.get("runAsNonRoot") is True, f"{case}: pod runAsNonRoot is not true")
    check(psc.get("runAsUser") == 65532, f"{case}: pod runAsUser is not 65532")
    check(psc.get("seccompProfile") == {"type": "RuntimeDefault"}, f"{case}: pod seccompProfile is not RuntimeDefault")
    containers = pod.get("containers", [])
    check(len(containers) == 1, f"{case}: expected one container")
    c = containers[0] if containers else {}
    sc = c.get("securityContext", {})
    check(sc.get("readOnlyRootFilesystem") is True, f"{case}: readOnlyRootFilesystem is not true")
    check(sc.get("allowPrivilegeEscalation") is False, f"{case}: allowPrivilegeEscalation is not false")
    check(sc.get("runAsNonRoot") is True, f"{case}: container runAsNonRoot is not true")
    check(sc.get("capabilities", {}).get("drop") == ["ALL"], f"{case}: capabilities do not drop ALL")
    check(not sc.get("capabilities", {}).get("add"), f"{case}: capabilities are added")
    check(sc.get("privileged") in (None, False), f"{case}: privileged container")
    check(c.get("args") == ["run", "--config", "/etc/gpu-vk/config.yaml"], f"{case}: args {c.get('args')}")
    check(c.get("resources", {}).get("requests", {}).get("cpu") and c.get("resources", {}).get("requests", {}).get("memory"),
          f"{case}: no cpu and memory requests")
    env = {e["name"]: e for e in c.get("env", [])}
    check(env.get("VK_INTERNAL_IP", {}).get("valueFrom") == {"fieldRef": {"fieldPath": "status.podIP"}},
          f"{case}: VK_INTERNAL_IP is not the pod IP")
    check("VK_LOG_JSON" in env, f"{case}: no VK_LOG_JSON")
    svc = env.get("VK_ADDRESS_SERVICE", {}).get("value", "")
    check(svc.endswith("-kubelet") and "/" in svc, f"{case}: VK_ADDRESS_SERVICE {svc!r} does not name the kubelet Service")
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    for probe in ("livenessProbe", "readinessProbe"):
        get = c.get(probe, {}).get("httpGet", {})
        check(get.get("path") == "/healthz" and get.get("port") == "metrics",
              f"{case}: {probe} is not GET /healthz on the metrics port: {get}")
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
    check(volumes.get("credentials", {}).get("secret", {}).get("secretName") == secret_name,
          f"{case}: the credentials volume is not the Secret {secret_name}")
    check(mounts.get("credentials", {}).get("mountPath") == SECRET_DIR and mounts["credentials"].get("readOnly") is True,
          f"{case}: the credentials are not mounted read-only at {SECRET_DIR}")
    check(mounts.get("config", {}).get("mountPath") == "/etc/gpu-vk", f"{case}: the config is not mounted at /etc/gpu-vk")
    return dep, c, ports, volumes


def check_config(docs, case, dep, ports, volumes):
    cm = one(docs, "ConfigMap", case)
    check(volumes.get("config", {}).get("configMap", {}).get("name") == cm.get("metadata", {}).get("name"),
          f"{case}: the config volume is not the chart's ConfigMap")
    config = yaml.safe_load(cm.get("data", {}).get("config.yaml", "")) or {}
    for key in ("nodeName", "clusterId", "providers"):
        check(config.get(key), f"{case}: config.yaml has no {key}")
    addr = str(config.get("metricsAddr", ""))
    host, _, port = addr.rpartition(":")
    check(host.strip("[]") not in ("127.0.0.1", "::1", "localhost", ""), f"{case}: metricsAddr {addr} is not reachable from outside the pod")
    check(port.isdigit() and ports.get("metrics") == int(port), f"{case}: metrics containerPort {ports.get('metrics')} is not metricsAddr's port {port}")
    check(ports.get("kubelet") == config.get("kubeletPort", 10250), f"{case}: kubelet containerPort is not kubeletPort")
    for p in config.get("providers", []):
        for key in ("apiKeyFile", "tokenFile"):
            path = p.get(key) or (p.get("settings") or {}).get(key)
            if path:
                check(path.startswith(SECRET_DIR + "/"), f"{case}: provider {p.get('name')} reads {key} {path} outside {SECRET_DIR}")
    services = {d["metadata"]["name"].rsplit("-", 1)[-1]: d for d in docs if d.get("kind") == "Service"}
    check(sorted(services) == ["admission", "kubelet", "metrics"],
          f"{case}: expected the Services *-admission, *-metrics and *-kubelet, found {sorted(services)}")
    admission = config.get("admission") or {}
    check(admission.get("enabled") is True and str(admission.get("service", "")).endswith("-admission"),
          f"{case}: config.yaml does not enable the admission check behind its Service: {admission}")
    check(ports.get("admission") == 9443, f"{case}: no admission containerPort 9443")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    for port, svc in services.items():
        selector = svc.get("spec", {}).get("selector", {})
        check(selector and all(labels.get(k) == v for k, v in selector.items()), f"{case}: the {port} Service does not select the VK pod")
        check([p.get("targetPort") for p in svc.get("spec", {}).get("ports", [])] == [port], f"{case}: the {port} Service does not target the {port} port")
    check(services.get("kubelet", {}).get("spec", {}).get("type") == "ClusterIP", f"{case}: the kubelet Service has no ClusterIP")
    return cm, config


def check_ha(docs):
    """Two replicas: they elect a leader, the kubelet Service selects the leader's pod only."""
    case = "ha"
    dep = one(docs, "Deployment", case)
    spec = dep.get("spec", {})
    check(spec.get("replicas") == 2, f"{case}: replicas is not 2")
    check(spec.get("strategy") == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
          f"{case}: strategy is not a rolling update one pod at a time without surge")
    pod = spec.get("template", {}).get("spec", {})
    env = {e["name"]: e for e in pod.get("containers", [{}])[0].get("env", [])}
    for name, field in (("VK_POD_NAME", "metadata.name"), ("VK_POD_NAMESPACE", "metadata.namespace")):
        got = env.get(name, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        check(got == field, f"{case}: {name} is not the downward API's {field}")
    check("podAntiAffinity" in (pod.get("affinity") or {}), f"{case}: no pod anti-affinity spreading the replicas")
    config = yaml.safe_load(one(docs, "ConfigMap", case).get("data", {}).get("config.yaml", "")) or {}
    le = config.get("leaderElection", {})
    check(le == {"enabled": True, "leaseDurationMs": 8000, "renewDeadlineMs": 6000, "retryPeriodMs": 1000},
          f"{case}: config.leaderElection is {le}")
    kubelet = [d for d in docs if d.get("kind") == "Service" and d["metadata"]["name"].endswith("-kubelet")]
    selector = kubelet[0].get("spec", {}).get("selector", {}) if kubelet else {}
    check(selector.get("gpu-vk.io/leader") == "true", f"{case}: the kubelet Service does not select the leader only")
    # The leader's certificate is the one in the webhook configuration: only it may answer.
    admission = [d for d in docs if d.get("kind") == "Service" and d["metadata"]["name"].endswith("-admission")]
    selector = admission[0].get("spec", {}).get("selector", {}) if admission else {}
    check(selector.get("gpu-vk.io/leader") == "true", f"{case}: the admission Service does not select the leader only")
    pdb = one(docs, "PodDisruptionBudget", case)
    check(pdb.get("spec", {}).get("maxUnavailable") == 1, f"{case}: the PodDisruptionBudget allows more than one pod down")


# The addresses the chart's check renders as the API server's (networkPolicy.apiServerCIDRs).
API_SERVER = ["192.0.2.10/32"]
METRICS_SERVER = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                  "podSelector": {"matchLabels": {"k8s-app": "metrics-server"}}}


def check_network_policies(docs, case, api_server, private, kubelet_clients=()):
    """Each NetworkPolicy selects exactly its Deployment's pods, opens the `private` ports only
    to the API server's ipBlocks (the kubelet port also to `kubelet_clients`), and the metrics
    port to everyone. `private` maps a Deployment name suffix ("" for the VK) to its ports."""
    policies = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "NetworkPolicy"}
    deps = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "Deployment"}
    check(len(policies) == len(private), f"{case}: expected {len(private)} NetworkPolicies, found {sorted(policies)}")
    for suffix, ports in private.items():
        dep = [d for n, d in deps.items() if n.endswith("-overflow") == (suffix == "-overflow")]
        pol = [d for n, d in policies.items() if n.endswith("-overflow") == (suffix == "-overflow")]
        if not (dep and pol):
            check(False, f"{case}: no NetworkPolicy for the Deployment{suffix}")
            continue
        spec = pol[0]["spec"]
        check(spec.get("podSelector", {}).get("matchLabels") == dep[0]["spec"]["selector"]["matchLabels"]
              and spec.get("policyTypes") == ["Ingress"],
              f"{case}: the NetworkPolicy{suffix} does not isolate exactly its Deployment's pods: {spec.get('podSelector')}")
        container = {p["name"] for p in dep[0]["spec"]["template"]["spec"]["containers"][0].get("ports", [])}
        for rule in spec.get("ingress", []):
            names = [p.get("port") for p in rule.get("ports", [])]
            check(set(names) <= container, f"{case}: the NetworkPolicy{suffix} names ports its pods do not have: {names}")
            peers = rule.get("from") or []
            if not set(names) & set(ports):
                check(names == ["metrics"], f"{case}: the NetworkPolicy{suffix} opens {names} to {peers or 'everyone'}")
            elif names == ["kubelet"] and kubelet_clients and peers == list(kubelet_clients):
                continue
            else:
                check(sorted(names) == sorted(ports) and peers == [{"ipBlock": {"cidr": c}} for c in api_server],
                      f"{case}: the NetworkPolicy{suffix} opens {names} to {peers or 'everyone'}, not the API server's {api_server} only")


def check_overflow(docs):
    """The overflow companion: never blocks pods, sees only opted-in ones, and its pods are not the VK's."""
    case = "overflow"
    hooks = one(docs, "MutatingWebhookConfiguration", case).get("webhooks", [{}])
    check(len(hooks) == 2, f"{case}: expected the overflow and hand-off webhooks")
    hook = hooks[0]
    # The hand-off's gate: research pods that opt in, in the research namespaces only, never
    # blocked.
    gate = hooks[1] if len(hooks) > 1 else {}
    research = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["research"]}]}
    check(gate.get("namespaceSelector") == research, f"{case}: the hand-off gate is not limited to the research namespaces: {gate.get('namespaceSelector')}")
    check(gate.get("objectSelector") == {"matchLabels": {"gpu-vk.io/handoff": "true"}}
          and gate.get("failurePolicy") == "Ignore"
          and gate.get("clientConfig", {}).get("service", {}).get("path") == "/gate",
          f"{case}: the hand-off webhook is not limited to opted-in research pods on /gate: {gate}")
    check(hook.get("failurePolicy") == "Ignore", f"{case}: a failing webhook would block pods (failurePolicy is not Ignore)")
    check(hook.get("objectSelector") == {"matchLabels": {"gpu-vk.io/overflow": "true"}}, f"{case}: the webhook sees pods that did not opt in")
    check(hook.get("namespaceSelector") == {
        "matchLabels": {"gpu-vk.io/overflow": "enabled"},
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["serving", "research"]}],
    }, f"{case}: the namespaceSelector is not the operator's narrowed to config.allowedNamespaces: {hook.get('namespaceSelector')}")
    check(hook.get("sideEffects") == "None", f"{case}: sideEffects is not None")
    deps = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "Deployment"}
    companion = [d for n, d in deps.items() if n.endswith("-overflow")]
    check(len(companion) == 1, f"{case}: expected the overflow Deployment")
    if companion:
        labels = companion[0]["spec"]["template"]["metadata"]["labels"]
        others = [d for n, d in deps.items() if not n.endswith("-overflow")]
        selectors = [d["spec"]["selector"]["matchLabels"] for d in others]
        selectors += [s["spec"]["selector"] for s in docs if s.get("kind") == "Service" and not s["metadata"]["name"].endswith("-overflow")]
        for sel in selectors:
            check(not all(labels.get(k) == v for k, v in sel.items()), f"{case}: the VK's selector {sel} selects the overflow pods")
    # The hand-off's pod creates and deletes kept to stand-ins on the virtual node.
    writes = check_policy_start(docs, case, "-overflow-pod-writes", "companion's pod-write policy")
    text = " ".join(v.get("expression", "") for v in writes.get("spec", {}).get("validations", []))
    check("'handoff.gpu-vk.io/standin'" in text and "object.spec.nodeName ==" in text,
          f"{case}: the companion's pod-write policy no longer pins stand-ins on the virtual node: {text}")
    role = [d for d in docs if d.get("kind") == "ClusterRole" and d["metadata"]["name"].endswith("-overflow")]
    hook_rule = [r for r in (role[0].get("rules", []) if role else []) if "mutatingwebhookconfigurations" in r.get("resources", [])]
    check(role and not hook_rule, f"{case}: the companion may write webhook configurations: {hook_rule}")
    # Its certificate comes from the chart's CA, which the webhook configuration trusts.
    secrets = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "Secret"}
    tls = [d for n, d in secrets.items() if n.endswith("-overflow-tls")]
    check(len(tls) == 1 and tls[0].get("type") == "kubernetes.io/tls", f"{case}: no kubernetes.io/tls Secret for the webhook")
    data = tls[0].get("data", {}) if tls else {}
    ca = base64.b64decode(data.get("ca.crt", "")).decode(errors="replace")
    check("BEGIN CERTIFICATE" in ca and hook.get("clientConfig", {}).get("caBundle") == data.get("ca.crt"),
          f"{case}: the webhook's caBundle is not the chart CA of its Secret")
    if companion:
        pod = companion[0]["spec"]["template"]["spec"]
        args = pod["containers"][0].get("args", [])
        check("--tls-cert-file=/etc/gpu-vk/overflow-tls/tls.crt" in args and not any(a.startswith("--webhook-config") for a in args),
              f"{case}: the companion does not serve the chart's certificate: {args}")
        check("--drain-seconds=5" in args, f"{case}: the companion is not given overflow.drainSeconds: {args}")
        vols = [v for v in pod.get("volumes", []) if v.get("secret", {}).get("secretName", "").endswith("-overflow-tls")]
        check(len(vols) == 1, f"{case}: the certificate Secret is not mounted")


def check_research_classes(docs):
    """Research named by PriorityClass: every pod of the research namespaces reaches the gate
    (no label selector), the companion gets the classes, the namespaces still bound it."""
    case = "overflow-classes"
    hooks = one(docs, "MutatingWebhookConfiguration", case).get("webhooks", [{}])
    gate = [h for h in hooks if h.get("clientConfig", {}).get("service", {}).get("path") == "/gate"]
    check(len(gate) == 1 and "objectSelector" not in gate[0], f"{case}: the gate still selects by label: {gate}")
    research = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["research"]}]}
    check(bool(gate) and gate[0].get("namespaceSelector") == research, f"{case}: the gate is not limited to the research namespaces")
    deps = [d for d in docs if d.get("kind") == "Deployment" and d["metadata"]["name"].endswith("-overflow")]
    args = deps[0]["spec"]["template"]["spec"]["containers"][0].get("args", []) if deps else []
    check("--handoff-research-priority-classes=research-high" in args, f"{case}: the companion is not given the classes: {args}")


def main(default_path, creds_path, creds_values_path, existing_path, ha_path, overflow_path, classes_path):
    # Default values: everything the chart makes, an empty chart-made Secret, one replica.
    docs = load(default_path)
    secret = one(docs, "Secret", "default")
    sa = one(docs, "ServiceAccount", "default")["metadata"]["name"]
    dep, c, ports, volumes = check_deployment(docs, "default", secret["metadata"]["name"], sa)
    check(dep["spec"].get("replicas") == 1, "default: replicas is not 1")
    check(c.get("imagePullPolicy") == "IfNotPresent", "default: imagePullPolicy is not IfNotPresent")
    check_config(docs, "default", dep, ports, volumes)
    check_rbac(docs, "default", sa, secret["metadata"]["namespace"])
    check_network_policies(docs, "default", API_SERVER, {"": ["kubelet", "admission"]}, [METRICS_SERVER])

    # Credentials from values: in the Secret, and nowhere else.
    docs = load(creds_path)
    with open(creds_values_path, encoding="utf-8") as f:
        values = yaml.safe_load(f)
    creds = values["credentials"]["values"]
    secret = one(docs, "Secret", "credentials")
    data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
    check(data == creds, f"credentials: the Secret holds {sorted(data)}, not {sorted(creds)}")
    sa = one(docs, "ServiceAccount", "credentials")["metadata"]["name"]
    dep, c, ports, volumes = check_deployment(docs, "credentials", secret["metadata"]["name"], sa)
    check(dep["spec"].get("replicas") == values["replicas"], f"credentials: replicas is not {values['replicas']}")
    _, config = check_config(docs, "credentials", dep, ports, volumes)
    for doc in docs:
        if doc is secret:
            continue
        text = yaml.safe_dump(doc)
        for key, value in creds.items():
            check(value not in text and base64.b64encode(value.encode()).decode() not in text,
                  f"credentials: the value of {key} appears in the {doc.get('kind')} {doc.get('metadata', {}).get('name')}")
    for p in config.get("providers", []):
        path = p.get("apiKeyFile") or (p.get("settings") or {}).get("tokenFile")
        check(path and path[len(SECRET_DIR) + 1:] in data, f"credentials: provider {p.get('name')} reads {path}, not a key of the Secret")
    check("checksum/credentials" in dep["spec"]["template"]["metadata"].get("annotations", {}),
          "credentials: no checksum/credentials annotation (a changed key would not restart the VK)")

    # An existing Secret and ServiceAccount: the chart makes neither, and mounts the named one.
    docs = load(existing_path)
    check_network_policies(docs, "existing", API_SERVER, {})
    check(not [d for d in docs if d.get("kind") == "Secret"], "existing: the chart made a Secret besides credentials.existingSecret")
    dep, _, _, _ = check_deployment(docs, "existing", "provider-keys", "vk-identity")
    sa_docs = [d for d in docs if d.get("kind") == "ServiceAccount"]
    check(len(sa_docs) == 1 and sa_docs[0]["metadata"]["name"] == "vk-identity", "existing: the ServiceAccount is not vk-identity")
    check_rbac(docs, "existing", "vk-identity", dep["metadata"]["namespace"])

    check_ha(load(ha_path))
    docs = load(overflow_path)
    check_overflow(docs)
    check_research_classes(load(classes_path))
    check_network_policies(docs, "overflow", API_SERVER + ["2001:db8::10/128"],
                           {"": ["kubelet", "admission"], "-overflow": ["webhook"]}, [METRICS_SERVER])
    # config.allowedNamespaces set: Secrets and ConfigMaps readable there only.
    vk_docs = [d for d in docs if "-overflow" not in d["metadata"]["name"]]
    sa = one(vk_docs, "ServiceAccount", "overflow")["metadata"]["name"]
    check_rbac(vk_docs, "overflow", sa, one(vk_docs, "Secret", "overflow")["metadata"]["namespace"],
               allowed=["serving", "research"])

    for f in failures:
        print(f"check_chart: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 8:
        sys.exit(__doc__ + "\nusage: check_chart.py DEFAULT.yaml CREDENTIALS.yaml CREDENTIALS-VALUES.yaml EXISTING.yaml HA.yaml OVERFLOW.yaml OVERFLOW-CLASSES.yaml")
    sys.exit(main(*sys.argv[1:]))
