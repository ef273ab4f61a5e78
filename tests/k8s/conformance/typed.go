package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

const protobuf = "application/vnd.kubernetes.protobuf"

// crudClient is what a typed client of one resource in one namespace offers.
type crudClient[T metav1.Object, L any] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Update(context.Context, T, metav1.UpdateOptions) (T, error)
	Get(context.Context, string, metav1.GetOptions) (T, error)
	List(context.Context, metav1.ListOptions) (L, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
}

// kind says how the generic checks make, read and change objects of one resource: each carries
// a value "v" (a data key, or a label where there is no data).
type kind[T metav1.Object, L any] struct {
	resource string
	make     func(name, v string) T
	value    func(T) string
	set      func(T, string)
	items    func(L) []T
	del      metav1.DeleteOptions
}

var configMaps = kind[*corev1.ConfigMap, *corev1.ConfigMapList]{
	resource: "configmaps",
	make: func(name, v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"v": v}}, Data: map[string]string{"v": v}}
	},
	value: func(c *corev1.ConfigMap) string { return c.Data["v"] },
	set:   func(c *corev1.ConfigMap, v string) { c.Data["v"], c.Labels["v"] = v, v },
	items: func(l *corev1.ConfigMapList) []*corev1.ConfigMap { return ptrs(l.Items) },
}

var secrets = kind[*corev1.Secret, *corev1.SecretList]{
	resource: "secrets",
	make: func(name, v string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"v": []byte(v)}, Type: corev1.SecretTypeOpaque}
	},
	value: func(s *corev1.Secret) string { return string(s.Data["v"]) },
	set:   func(s *corev1.Secret, v string) { s.Data["v"] = []byte(v) },
	items: func(l *corev1.SecretList) []*corev1.Secret { return ptrs(l.Items) },
}

var zero int64

var pods = kind[*corev1.Pod, *corev1.PodList]{
	resource: "pods",
	make:     func(name, v string) *corev1.Pod { return pod(name, "wcc-node", map[string]string{"v": v}) },
	value:    func(p *corev1.Pod) string { return p.Labels["v"] },
	set:      func(p *corev1.Pod, v string) { p.Labels["v"] = v },
	items:    func(l *corev1.PodList) []*corev1.Pod { return ptrs(l.Items) },
	// Deleted at once: no kubelet confirms a graceful deletion here.
	del: metav1.DeleteOptions{GracePeriodSeconds: &zero},
}

func pod(name, node string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
}

func ptrs[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

func (e *env) configMapsCRUD(ctx context.Context) (string, error) {
	return crud(ctx, e, e.cs.CoreV1().ConfigMaps(e.ns), configMaps)
}

func (e *env) secretsCRUD(ctx context.Context) (string, error) {
	return crud(ctx, e, e.cs.CoreV1().Secrets(e.ns), secrets)
}

func (e *env) podsCRUD(ctx context.Context) (string, error) {
	return crud(ctx, e, e.cs.CoreV1().Pods(e.ns), pods)
}

// crud creates, gets, updates, lists and deletes one object with a typed client, and checks that
// every exchange was protobuf both ways.
func crud[T metav1.Object, L any](ctx context.Context, e *env, c crudClient[T, L], k kind[T, L]) (string, error) {
	mark := e.rec.mark()
	name := "crud-" + k.resource
	created, err := c.Create(ctx, k.make(name, "1"), metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create: %w", err)
	}
	if k.value(created) != "1" || created.GetResourceVersion() == "" || created.GetUID() == "" {
		return "", fmt.Errorf("create answered v=%q rv=%q uid=%q", k.value(created), created.GetResourceVersion(), created.GetUID())
	}
	got, err := c.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("get: %w", err)
	}
	if k.value(got) != "1" || got.GetResourceVersion() != created.GetResourceVersion() || got.GetUID() != created.GetUID() {
		return "", fmt.Errorf("get answered v=%q rv=%q uid=%q, created v=1 rv=%q uid=%q", k.value(got), got.GetResourceVersion(), got.GetUID(), created.GetResourceVersion(), created.GetUID())
	}
	k.set(got, "2")
	updated, err := c.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		return "", fmt.Errorf("update: %w", err)
	}
	if k.value(updated) != "2" || updated.GetResourceVersion() == created.GetResourceVersion() {
		return "", fmt.Errorf("update answered v=%q rv=%q (created at %s)", k.value(updated), updated.GetResourceVersion(), created.GetResourceVersion())
	}
	// A stale update is a conflict.
	k.set(got, "3")
	if _, err := c.Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		return "", fmt.Errorf("update at the old resourceVersion %s: want 409 Conflict, got %v", got.GetResourceVersion(), err)
	}
	list, err := c.List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list: %w", err)
	}
	found := false
	for _, it := range k.items(list) {
		if it.GetName() == name {
			found = true
			if k.value(it) != "2" || it.GetResourceVersion() != updated.GetResourceVersion() {
				return "", fmt.Errorf("list has %s at v=%q rv=%q, want v=2 rv=%s", name, k.value(it), it.GetResourceVersion(), updated.GetResourceVersion())
			}
		}
	}
	if !found {
		return "", fmt.Errorf("list has no %s", name)
	}
	if err := c.Delete(ctx, name, k.del); err != nil {
		return "", fmt.Errorf("delete: %w", err)
	}
	if _, err := c.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("get after delete: want 404 NotFound, got %v", err)
	}
	return checkProtobuf(e.rec.since(mark), k.resource)
}

// checkProtobuf: every answered request of the resource asked for protobuf and was answered in
// it (errors included: kube-apiserver sends its Status as protobuf too).
func checkProtobuf(xs []exchange, resource string) (string, error) {
	n := 0
	for _, x := range xs {
		if !strings.Contains(x.path, "/"+resource) || x.err != nil {
			continue
		}
		n++
		if !strings.HasPrefix(x.accept, protobuf) {
			return "", fmt.Errorf("client-go did not ask for protobuf: %s", x)
		}
		if !strings.HasPrefix(x.contentType, protobuf) {
			return "", fmt.Errorf("answered without protobuf: %s", x)
		}
		if (x.method == http.MethodPost || x.method == http.MethodPut) && !strings.HasPrefix(x.sentType, protobuf) {
			return "", fmt.Errorf("client-go did not send protobuf: %s (Content-Type %s)", x, x.sentType)
		}
	}
	return fmt.Sprintf("%d exchanges, all protobuf", n), nil
}

func (e *env) listPaged(ctx context.Context) (string, error) {
	c := e.cs.CoreV1().ConfigMaps(e.ns)
	var want []string
	for i := range 5 {
		cm := configMaps.make(fmt.Sprintf("page-%d", i), "1")
		cm.Labels["page"] = "1"
		if _, err := c.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return "", fmt.Errorf("create: %w", err)
		}
		want = append(want, cm.Name)
	}
	var got []string
	opts := metav1.ListOptions{LabelSelector: "page=1", Limit: 2}
	pages, rv := 0, ""
	for {
		l, err := c.List(ctx, opts)
		if err != nil {
			return "", fmt.Errorf("page %d (continue %q): %w", pages, opts.Continue, err)
		}
		pages++
		if rv == "" {
			rv = l.ResourceVersion
		} else if l.ResourceVersion != rv {
			return "", fmt.Errorf("page %d at resourceVersion %s, the first at %s: pages are one snapshot", pages, l.ResourceVersion, rv)
		}
		if len(l.Items) > 2 {
			return "", fmt.Errorf("page %d has %d items, limit 2", pages, len(l.Items))
		}
		for _, it := range l.Items {
			got = append(got, it.Name)
		}
		if l.Continue == "" {
			break
		}
		opts.Continue = l.Continue
		if pages > 10 {
			return "", fmt.Errorf("more than 10 pages for 5 objects")
		}
	}
	if !slices.Equal(got, want) || pages != 3 {
		return "", fmt.Errorf("%d pages of %v, want 3 pages of %v", pages, got, want)
	}
	return fmt.Sprintf("3 pages at rv %s", rv), nil
}

func (e *env) listRV0(ctx context.Context) (string, error) {
	c := e.cs.CoreV1().ConfigMaps(e.ns)
	created, err := c.Create(ctx, configMaps.make("rv-match", "1"), metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create: %w", err)
	}
	any0, err := c.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return "", fmt.Errorf("list resourceVersion=0: %w", err)
	}
	if any0.ResourceVersion == "" {
		return "", fmt.Errorf("list resourceVersion=0 has no resourceVersion")
	}
	for _, match := range []metav1.ResourceVersionMatch{metav1.ResourceVersionMatchNotOlderThan, metav1.ResourceVersionMatchExact} {
		l, err := c.List(ctx, metav1.ListOptions{ResourceVersion: created.ResourceVersion, ResourceVersionMatch: match})
		if err != nil {
			return "", fmt.Errorf("list resourceVersion=%s resourceVersionMatch=%s: %w", created.ResourceVersion, match, err)
		}
		if !slices.ContainsFunc(l.Items, func(c corev1.ConfigMap) bool { return c.Name == "rv-match" }) {
			return "", fmt.Errorf("list resourceVersion=%s resourceVersionMatch=%s (answered at %s) misses the object written at it", created.ResourceVersion, match, l.ResourceVersion)
		}
		if match == metav1.ResourceVersionMatchExact && l.ResourceVersion != created.ResourceVersion {
			return "", fmt.Errorf("list resourceVersionMatch=Exact at %s answered at %s", created.ResourceVersion, l.ResourceVersion)
		}
	}
	got, err := c.Get(ctx, "rv-match", metav1.GetOptions{ResourceVersion: "0"})
	if err != nil && !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("get resourceVersion=0: %w", err)
	}
	if err == nil && got.UID != created.UID {
		return "", fmt.Errorf("get resourceVersion=0 answered another object: uid %s, created %s", got.UID, created.UID)
	}
	return fmt.Sprintf("resourceVersion=0 at %s", any0.ResourceVersion), nil
}

// seenEvent is a watch event as the checks compare it.
type seenEvent struct {
	typ  watch.EventType
	name string
	rv   string
	v    string
	// deleting: the object has a deletionTimestamp.
	deleting bool
}

func (s seenEvent) String() string {
	d := ""
	if s.deleting {
		d = " deleting"
	}
	return fmt.Sprintf("%s %s rv=%s v=%s%s", s.typ, s.name, s.rv, s.v, d)
}

func describe(ev watch.Event) seenEvent {
	s := seenEvent{typ: ev.Type}
	if o, ok := ev.Object.(metav1.Object); ok {
		s.name, s.rv = o.GetName(), o.GetResourceVersion()
		s.v = o.GetLabels()["v"]
		s.deleting = o.GetDeletionTimestamp() != nil
	}
	if st, ok := ev.Object.(*metav1.Status); ok {
		s.name = fmt.Sprintf("Status %d %s: %s", st.Code, st.Reason, st.Message)
	}
	return s
}

// next reads watch events until n that are not bookmarks have come; an ERROR event or the end
// of the stream fails.
func next(ctx context.Context, w watch.Interface, n int) ([]seenEvent, error) {
	var out []seenEvent
	for len(out) < n {
		select {
		case <-ctx.Done():
			return out, fmt.Errorf("%d events of %d before the time limit: %v", len(out), n, out)
		case ev, ok := <-w.ResultChan():
			if !ok {
				return out, fmt.Errorf("the watch ended after %v", out)
			}
			if ev.Type == watch.Error {
				return out, fmt.Errorf("ERROR event %v after %v", describe(ev), out)
			}
			if ev.Type != watch.Bookmark {
				out = append(out, describe(ev))
			}
		}
	}
	return out, nil
}

// expect compares events with the wanted (type, name, v) and checks the resourceVersions grow.
func expect(got []seenEvent, want ...seenEvent) error {
	if len(got) != len(want) {
		return fmt.Errorf("events %v, want %v", got, want)
	}
	last := uint64(0)
	for i := range got {
		if got[i].typ != want[i].typ || got[i].name != want[i].name || (want[i].v != "" && got[i].v != want[i].v) || (want[i].typ != watch.Deleted && got[i].deleting != want[i].deleting) {
			return fmt.Errorf("event %d is %v, want %v (all: %v)", i, got[i], want[i], got)
		}
		if want[i].rv != "" && got[i].rv != want[i].rv {
			return fmt.Errorf("event %d is %v, want rv %s (all: %v)", i, got[i], want[i].rv, got)
		}
		rv, err := strconv.ParseUint(got[i].rv, 10, 64)
		if err != nil || rv <= last {
			return fmt.Errorf("event %d has resourceVersion %q after %d: not increasing (all: %v)", i, got[i].rv, last, got)
		}
		last = rv
	}
	return nil
}

func (e *env) watchConfigMaps(ctx context.Context) (string, error) {
	mark := e.rec.mark()
	c := e.cs.CoreV1().ConfigMaps(e.ns)
	sel := "watch=typed"
	l, err := c.List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return "", fmt.Errorf("list: %w", err)
	}
	w, err := c.Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: l.ResourceVersion})
	if err != nil {
		return "", fmt.Errorf("watch from %s: %w", l.ResourceVersion, err)
	}
	defer w.Stop()
	cm := configMaps.make("watched", "1")
	cm.Labels["watch"] = "typed"
	created, err := c.Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create: %w", err)
	}
	configMaps.set(created, "2")
	updated, err := c.Update(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		return "", fmt.Errorf("update: %w", err)
	}
	if err := c.Delete(ctx, "watched", metav1.DeleteOptions{}); err != nil {
		return "", fmt.Errorf("delete: %w", err)
	}
	got, err := next(ctx, w, 3)
	if err != nil {
		return "", err
	}
	if err := expect(got,
		seenEvent{typ: watch.Added, name: "watched", v: "1", rv: created.ResourceVersion},
		seenEvent{typ: watch.Modified, name: "watched", v: "2", rv: updated.ResourceVersion},
		seenEvent{typ: watch.Deleted, name: "watched", v: "2"},
	); err != nil {
		return "", err
	}
	return checkProtobuf(e.rec.since(mark), "configmaps")
}

func (e *env) selectList(ctx context.Context) (string, error) {
	c := e.cs.CoreV1().Pods(e.ns)
	nodeA, nodeB := e.ns+"-a", e.ns+"-b"
	for _, p := range []*corev1.Pod{
		pod("sel-a1", nodeA, map[string]string{"sel": "1", "tier": "x"}),
		pod("sel-a2", nodeA, map[string]string{"sel": "1", "tier": "y"}),
		pod("sel-b1", nodeB, map[string]string{"sel": "1", "tier": "x"}),
	} {
		if _, err := c.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return "", fmt.Errorf("create %s: %w", p.Name, err)
		}
	}
	defer func() {
		for _, n := range []string{"sel-a1", "sel-a2", "sel-b1"} {
			_ = c.Delete(context.Background(), n, pods.del)
		}
	}()
	all := e.cs.CoreV1().Pods("")
	cases := []struct {
		ns     bool
		field  string
		labels string
		want   []string
	}{
		{true, "spec.nodeName=" + nodeA, "", []string{"sel-a1", "sel-a2"}},
		{true, "metadata.name=sel-b1", "", []string{"sel-b1"}},
		{true, "", "tier=x", []string{"sel-a1", "sel-b1"}},
		{true, "", "tier in (x,y),tier!=y", []string{"sel-a1", "sel-b1"}},
		{true, "", "sel=1,!tier", nil},
		{true, "spec.nodeName=" + nodeA, "tier=x", []string{"sel-a1"}},
		{true, "spec.nodeName!=" + nodeA, "sel", []string{"sel-b1"}},
		{false, "spec.nodeName=" + nodeA, "", []string{"sel-a1", "sel-a2"}},
		// kube-scheduler's pod informer.
		{false, "status.phase!=Succeeded,status.phase!=Failed,spec.nodeName=" + nodeA, "", []string{"sel-a1", "sel-a2"}},
		{false, "metadata.namespace=" + e.ns + ",spec.nodeName=" + nodeB, "", []string{"sel-b1"}},
	}
	for _, tc := range cases {
		lc := c
		if !tc.ns {
			lc = all
		}
		l, err := lc.List(ctx, metav1.ListOptions{FieldSelector: tc.field, LabelSelector: tc.labels})
		if err != nil {
			return "", fmt.Errorf("list (all namespaces: %v) fieldSelector=%q labelSelector=%q: %w", !tc.ns, tc.field, tc.labels, err)
		}
		var got []string
		for _, p := range l.Items {
			got = append(got, p.Name)
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			return "", fmt.Errorf("list (all namespaces: %v) fieldSelector=%q labelSelector=%q: got %v, want %v", !tc.ns, tc.field, tc.labels, got, tc.want)
		}
	}
	// A field the resource does not select on is refused, as kube-apiserver does.
	_, err := c.List(ctx, metav1.ListOptions{FieldSelector: "spec.dnsPolicy=ClusterFirst"})
	if !apierrors.IsBadRequest(err) {
		return "", fmt.Errorf("list fieldSelector=spec.dnsPolicy=ClusterFirst: want 400 BadRequest, got %v", err)
	}
	return fmt.Sprintf("%d selections", len(cases)), nil
}

func (e *env) watchNodeName(ctx context.Context) (string, error) {
	c := e.cs.CoreV1().Pods(e.ns)
	nodeA, nodeB := e.ns+"-watch-a", e.ns+"-watch-b"
	sel := "spec.nodeName=" + nodeA
	l, err := c.List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return "", fmt.Errorf("list: %w", err)
	}
	w, err := c.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: l.ResourceVersion})
	if err != nil {
		return "", fmt.Errorf("watch: %w", err)
	}
	defer w.Stop()
	// The pod on the other node comes first: if it leaked, it would be the first event.
	if _, err := c.Create(ctx, pod("watch-b", nodeB, map[string]string{"v": "1"}), metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create watch-b: %w", err)
	}
	created, err := c.Create(ctx, pod("watch-a", nodeA, map[string]string{"v": "1"}), metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create watch-a: %w", err)
	}
	created.Labels["v"] = "2"
	if _, err := c.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		return "", fmt.Errorf("update watch-a: %w", err)
	}
	for _, n := range []string{"watch-b", "watch-a"} {
		if err := c.Delete(ctx, n, pods.del); err != nil {
			return "", fmt.Errorf("delete %s: %w", n, err)
		}
	}
	got, err := next(ctx, w, 4)
	if err != nil {
		return "", err
	}
	// Deleting a pod bound to a node, even with gracePeriodSeconds=0, first sets its
	// deletionTimestamp (MODIFIED), then removes it.
	return "", expect(got,
		seenEvent{typ: watch.Added, name: "watch-a", v: "1"},
		seenEvent{typ: watch.Modified, name: "watch-a", v: "2"},
		seenEvent{typ: watch.Modified, name: "watch-a", v: "2", deleting: true},
		seenEvent{typ: watch.Deleted, name: "watch-a"},
	)
}

func (e *env) watchMetadataName(ctx context.Context) (string, error) {
	c := e.cs.CoreV1().ConfigMaps(e.ns)
	sel := "metadata.name=by-name-x"
	l, err := c.List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return "", fmt.Errorf("list: %w", err)
	}
	w, err := c.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: l.ResourceVersion})
	if err != nil {
		return "", fmt.Errorf("watch: %w", err)
	}
	defer w.Stop()
	for _, n := range []string{"by-name-y", "by-name-x"} {
		if _, err := c.Create(ctx, configMaps.make(n, "1"), metav1.CreateOptions{}); err != nil {
			return "", fmt.Errorf("create %s: %w", n, err)
		}
	}
	x, err := c.Get(ctx, "by-name-x", metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("get: %w", err)
	}
	configMaps.set(x, "2")
	if _, err := c.Update(ctx, x, metav1.UpdateOptions{}); err != nil {
		return "", fmt.Errorf("update: %w", err)
	}
	for _, n := range []string{"by-name-y", "by-name-x"} {
		if err := c.Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			return "", fmt.Errorf("delete %s: %w", n, err)
		}
	}
	got, err := next(ctx, w, 3)
	if err != nil {
		return "", err
	}
	return "", expect(got,
		seenEvent{typ: watch.Added, name: "by-name-x", v: "1"},
		seenEvent{typ: watch.Modified, name: "by-name-x", v: "2"},
		seenEvent{typ: watch.Deleted, name: "by-name-x"},
	)
}

// watchLabelTransitions: an object entering a label selector is ADDED to its watchers, and one
// leaving it DELETED, carrying its last matching content at the new resourceVersion (as the
// cacher and the etcd3 watcher do).
func (e *env) watchLabelTransitions(ctx context.Context) (string, error) {
	c := e.cs.CoreV1().ConfigMaps(e.ns)
	sel := "color=blue,lt=1"
	l, err := c.List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return "", fmt.Errorf("list: %w", err)
	}
	w, err := c.Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: l.ResourceVersion})
	if err != nil {
		return "", fmt.Errorf("watch: %w", err)
	}
	defer w.Stop()
	cm := configMaps.make("chameleon", "1")
	cm.Labels["lt"], cm.Labels["color"] = "1", "red"
	cur, err := c.Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create: %w", err)
	}
	var rvs []string
	for i, color := range []string{"blue", "red", "blue"} {
		cur.Labels["color"] = color
		configMaps.set(cur, strconv.Itoa(i+2))
		if cur, err = c.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return "", fmt.Errorf("update to %s: %w", color, err)
		}
		rvs = append(rvs, cur.ResourceVersion)
	}
	if err := c.Delete(ctx, "chameleon", metav1.DeleteOptions{}); err != nil {
		return "", fmt.Errorf("delete: %w", err)
	}
	got, err := next(ctx, w, 4)
	if err != nil {
		return "", err
	}
	return "", expect(got,
		seenEvent{typ: watch.Added, name: "chameleon", v: "2", rv: rvs[0]},
		seenEvent{typ: watch.Deleted, name: "chameleon", v: "2", rv: rvs[1]},
		seenEvent{typ: watch.Added, name: "chameleon", v: "4", rv: rvs[2]},
		seenEvent{typ: watch.Deleted, name: "chameleon", v: "4"},
	)
}

// bookmarks: a watch that allows them gets at least one before its timeout ends it (the cacher
// sends one 2 s before the deadline), at a resourceVersion past the writes made before it that
// the watch does not select.
func (e *env) bookmarks(ctx context.Context) (string, error) {
	c := e.cs.CoreV1().ConfigMaps(e.ns)
	l, err := c.List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list: %w", err)
	}
	start, _ := strconv.ParseUint(l.ResourceVersion, 10, 64)
	timeout := int64(5)
	w, err := c.Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion, AllowWatchBookmarks: true, TimeoutSeconds: &timeout, LabelSelector: "bookmarks=1"})
	if err != nil {
		return "", fmt.Errorf("watch: %w", err)
	}
	defer w.Stop()
	// A write the watch does not select: its bookmarks must move past it.
	bump, err := c.Create(ctx, configMaps.make("bookmark-bump", "1"), metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create: %w", err)
	}
	bumped, _ := strconv.ParseUint(bump.ResourceVersion, 10, 64)
	var marks []string
	for {
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("the watch with timeoutSeconds=5 did not end; bookmarks %v", marks)
		case ev, ok := <-w.ResultChan():
			if !ok {
				if len(marks) == 0 {
					return "", fmt.Errorf("no BOOKMARK in a watch of 5 s with allowWatchBookmarks")
				}
				return fmt.Sprintf("bookmarks at %v", marks), nil
			}
			if ev.Type != watch.Bookmark {
				return "", fmt.Errorf("unexpected event %v", describe(ev))
			}
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok {
				return "", fmt.Errorf("a BOOKMARK of %T, want *v1.ConfigMap", ev.Object)
			}
			rv, err := strconv.ParseUint(cm.ResourceVersion, 10, 64)
			if err != nil || rv < start {
				return "", fmt.Errorf("a BOOKMARK at resourceVersion %q, the watch started at %d", cm.ResourceVersion, start)
			}
			if rv < bumped {
				return "", fmt.Errorf("a BOOKMARK at resourceVersion %d, older than a write at %d before it (the watch started at %d)", rv, bumped, start)
			}
			marks = append(marks, cm.ResourceVersion)
		}
	}
}

// watchListRaw: a WatchList request (sendInitialEvents) streams the current objects as ADDED,
// then a BOOKMARK annotated k8s.io/initial-events-end, then live events.
func (e *env) watchListRaw(ctx context.Context) (string, error) {
	c := e.cs.CoreV1().ConfigMaps(e.ns)
	var last uint64
	for _, n := range []string{"wl-1", "wl-2"} {
		cm := configMaps.make(n, "1")
		cm.Labels["wl"] = "1"
		created, err := c.Create(ctx, cm, metav1.CreateOptions{})
		if err != nil {
			return "", fmt.Errorf("create %s: %w", n, err)
		}
		last, _ = strconv.ParseUint(created.ResourceVersion, 10, 64)
	}
	yes := true
	w, err := c.Watch(ctx, metav1.ListOptions{LabelSelector: "wl=1", SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
	if err != nil {
		return "", fmt.Errorf("watch sendInitialEvents=true: %w", err)
	}
	defer w.Stop()
	var initial []string
	for {
		var ev watch.Event
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no initial-events-end bookmark; initial events %v", initial)
		case ev = <-w.ResultChan():
		}
		if ev.Type == watch.Added {
			initial = append(initial, describe(ev).name)
			continue
		}
		if ev.Type == watch.Error && !e.watchListRequired {
			return fmt.Sprintf("refused: %v", describe(ev)), nil
		}
		if ev.Type != watch.Bookmark {
			return "", fmt.Errorf("event %v among the initial events %v", describe(ev), initial)
		}
		cm := ev.Object.(*corev1.ConfigMap)
		if cm.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
			continue
		}
		rv, _ := strconv.ParseUint(cm.ResourceVersion, 10, 64)
		if rv < last {
			return "", fmt.Errorf("initial-events-end at %s, older than the last write %d", cm.ResourceVersion, last)
		}
		break
	}
	slices.Sort(initial)
	if !slices.Equal(initial, []string{"wl-1", "wl-2"}) {
		return "", fmt.Errorf("initial events %v, want [wl-1 wl-2]", initial)
	}
	cm := configMaps.make("wl-3", "1")
	cm.Labels["wl"] = "1"
	if _, err := c.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create wl-3: %w", err)
	}
	got, err := next(ctx, w, 1)
	if err != nil {
		return "", err
	}
	if got[0].typ != watch.Added || got[0].name != "wl-3" {
		return "", fmt.Errorf("after the initial events: %v, want ADDED wl-3", got)
	}
	return "", nil
}
