"""The official Kubernetes Python client, unchanged, against watchcache in front of kube-apiserver
(reads from watchcache's cache, writes forwarded).

Usage: client_test.py http://127.0.0.1:PORT
"""
import sys

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

cfg = client.Configuration()
cfg.host = sys.argv[1]
api = client.CoreV1Api(client.ApiClient(cfg))


def pod(name, node, app):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
    }


# No controller manager runs here to make the namespace's service account; pods need it.
api.create_namespaced_service_account("default", {"metadata": {"name": "default"}})

# Create.
for i in range(6):
    created = api.create_namespaced_pod("default", pod(f"p{i}", f"node-{i % 2}", "web" if i < 3 else "db"))
    assert created.metadata.name == f"p{i}" and created.metadata.resource_version, created.metadata
try:
    api.create_namespaced_pod("default", pod("p0", "node-0", "web"))
    raise AssertionError("creating p0 twice must fail")
except ApiException as e:
    assert e.status == 409 and "AlreadyExists" in e.body, (e.status, e.body)

# List with field and label selectors.
pods = api.list_pod_for_all_namespaces(field_selector="spec.nodeName=node-0", label_selector="app=web")
assert [p.metadata.name for p in pods.items] == ["p0", "p2"], [p.metadata.name for p in pods.items]
pods = api.list_namespaced_pod("default", label_selector="app in (db),app!=web")
assert [p.metadata.name for p in pods.items] == ["p3", "p4", "p5"]
paged = api.list_namespaced_pod("default", limit=4)
assert len(paged.items) == 4 and paged.metadata._continue
rest = api.list_namespaced_pod("default", limit=4, _continue=paged.metadata._continue)
assert [p.metadata.name for p in rest.items] == ["p4", "p5"]
try:
    api.list_namespaced_pod("default", label_selector="app in (web")
    raise AssertionError("a bad selector must fail")
except ApiException as e:
    assert e.status == 400 and "position" in e.body, e.body
start = pods.metadata.resource_version

# Update, including a conflict.
p0 = api.read_namespaced_pod("p0", "default")
p0.metadata.labels["tier"] = "front"
updated = api.replace_namespaced_pod("p0", "default", p0)
assert int(updated.metadata.resource_version) > int(p0.metadata.resource_version)
try:
    api.replace_namespaced_pod("p0", "default", p0)  # p0 still carries the old resourceVersion
    raise AssertionError("a stale update must fail")
except ApiException as e:
    assert e.status == 409 and "Conflict" in e.body, (e.status, e.body)

# Delete (at once: no kubelet runs here to confirm a graceful deletion).
api.delete_namespaced_pod("p1", "default", grace_period_seconds=0)
try:
    api.read_namespaced_pod("p1", "default")
    raise AssertionError("p1 must be gone")
except ApiException as e:
    assert e.status == 404

# Watch from a resource_version, with bookmarks: the changes since `start` on node-0.
w = watch.Watch()
seen = []
for ev in w.stream(api.list_namespaced_pod, "default", resource_version=start,
                   field_selector="spec.nodeName=node-0", allow_watch_bookmarks=True, timeout_seconds=5):
    seen.append((ev["type"], ev["object"].metadata.name))
    if len(seen) == 1:
        w.stop()
assert seen == [("MODIFIED", "p0")], seen

# A watch on all pods sees a new pod as it is created.
w = watch.Watch()
for ev in w.stream(api.list_namespaced_pod, "default", resource_version=updated.metadata.resource_version,
                   allow_watch_bookmarks=True, timeout_seconds=10):
    if ev["type"] == "DELETED":
        assert ev["object"].metadata.name == "p1"
        api.create_namespaced_pod("default", pod("late", "node-1", "web"))
    elif ev["type"] == "ADDED":
        assert ev["object"].metadata.name == "late"
        w.stop()
print("OK")
