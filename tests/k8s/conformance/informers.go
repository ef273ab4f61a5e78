package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
)

type informerKind string

const (
	typedInformer    informerKind = "typed"
	metadataInformer informerKind = "metadata"
	dynamicInformer  informerKind = "dynamic"
)

// informed is one call of an informer's handler.
type informed struct {
	op      string // add, update, delete; resync is an update without a new resourceVersion
	name    string
	rv      string
	v       string // the label "v"
	data    string // the data key "v" where the object carries data (typed and dynamic)
	goType  string
	initial bool
	// deleting: the object has a deletionTimestamp.
	deleting bool
}

func (i informed) String() string {
	s := fmt.Sprintf("%s %s rv=%s v=%s", i.op, i.name, i.rv, i.v)
	if i.initial {
		s += " (initial)"
	}
	if i.deleting {
		s += " deleting"
	}
	return s
}

// handlerLog records every handler call, in order.
type handlerLog struct {
	mu    sync.Mutex
	calls []informed
}

func (h *handlerLog) record(op string, obj any, initial bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
		op += "(final state unknown)"
	}
	i := informed{op: op, initial: initial, goType: fmt.Sprintf("%T", obj)}
	if m, err := meta.Accessor(obj); err == nil {
		i.name, i.rv, i.v = m.GetName(), m.GetResourceVersion(), m.GetLabels()["v"]
		i.deleting = m.GetDeletionTimestamp() != nil
	}
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		i.data = o.Data["v"]
	case *unstructured.Unstructured:
		i.data, _, _ = unstructured.NestedString(o.Object, "data", "v")
	}
	h.mu.Lock()
	h.calls = append(h.calls, i)
	h.mu.Unlock()
}

func (h *handlerLog) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) { h.record("add", obj, initial) },
		UpdateFunc: func(old, cur any) {
			op := "update"
			if mo, err := meta.Accessor(old); err == nil {
				if mc, err := meta.Accessor(cur); err == nil && mo.GetResourceVersion() == mc.GetResourceVersion() {
					op = "resync"
				}
			}
			h.record(op, cur, false)
		},
		DeleteFunc: func(obj any) { h.record("delete", obj, false) },
	}
}

// wait polls until the calls satisfy done.
func (h *handlerLog) wait(ctx context.Context, what string, done func([]informed) bool) ([]informed, error) {
	for {
		h.mu.Lock()
		calls := slices.Clone(h.calls)
		h.mu.Unlock()
		if done(calls) {
			return calls, nil
		}
		select {
		case <-ctx.Done():
			return calls, fmt.Errorf("%s: not within the time limit; handler calls %v", what, calls)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func hasCall(op, name string) func([]informed) bool {
	return func(calls []informed) bool {
		return slices.ContainsFunc(calls, func(i informed) bool { return i.op == op && i.name == name })
	}
}

// started is an informer of one kind, running until stop.
type started struct {
	informer cache.SharedIndexInformer
	stop     func()
}

// startInformer makes an informer of a resource of the test namespace through a fresh factory
// of that kind, with the handler, and starts it with WatchListClient as asked.
func (e *env) startInformer(ctx context.Context, kind informerKind, resource string, resync time.Duration, watchList bool, tweak func(*metav1.ListOptions), h *handlerLog) (*started, error) {
	gvr := schema.GroupVersionResource{Version: "v1", Resource: resource}
	var inf cache.SharedIndexInformer
	var start func(<-chan struct{})
	var shutdown func()
	switch kind {
	case typedInformer:
		f := informers.NewSharedInformerFactoryWithOptions(e.cs, resync, informers.WithNamespace(e.ns), informers.WithTweakListOptions(tweak))
		gi, err := f.ForResource(gvr)
		if err != nil {
			return nil, err
		}
		inf, start, shutdown = gi.Informer(), f.Start, f.Shutdown
	case metadataInformer:
		f := metadatainformer.NewFilteredSharedInformerFactory(e.meta, resync, e.ns, tweak)
		inf, start, shutdown = f.ForResource(gvr).Informer(), f.Start, f.Shutdown
	case dynamicInformer:
		f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(e.dyn, resync, e.ns, tweak)
		inf, start, shutdown = f.ForResource(gvr).Informer(), f.Start, f.Shutdown
	}
	if _, err := inf.AddEventHandlerWithResyncPeriod(h.handler(), resync); err != nil {
		return nil, err
	}
	// Reflectors read the gate when the informer runs: set it for this one, and put it back once
	// the informer has started.
	prev := watchListOn.Swap(watchList)
	stopCh := make(chan struct{})
	start(stopCh)
	ok := cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	watchListOn.Store(prev)
	s := &started{informer: inf, stop: func() { close(stopCh); shutdown() }}
	if !ok {
		s.stop()
		return nil, fmt.Errorf("the %s informer of %s did not sync", kind, resource)
	}
	return s, nil
}

// expectCalls compares handler calls with the wanted (op, name, v) and checks that the
// resourceVersions grow and the objects are whole.
func expectCalls(kind informerKind, got []informed, want ...informed) error {
	if len(got) != len(want) {
		return fmt.Errorf("handler calls %v, want %v", got, want)
	}
	last := uint64(0)
	for i := range got {
		g, w := got[i], want[i]
		if g.op != w.op || g.name != w.name || (w.v != "" && g.v != w.v) || g.initial != w.initial || (w.op != "delete" && g.deleting != w.deleting) {
			return fmt.Errorf("call %d is %v, want %v (all: %v)", i, g, w, got)
		}
		rv, err := strconv.ParseUint(g.rv, 10, 64)
		if err != nil || rv <= last {
			return fmt.Errorf("call %d has resourceVersion %q after %d: not increasing (all: %v)", i, g.rv, last, got)
		}
		last = rv
	}
	return checkObjects(kind, got)
}

// checkObjects: each kind of informer hands its own Go type, and typed and dynamic objects carry
// their data.
func checkObjects(kind informerKind, calls []informed) error {
	wantType := map[informerKind]string{
		typedInformer:    "*v1.",
		metadataInformer: "*v1.PartialObjectMetadata",
		dynamicInformer:  "*unstructured.Unstructured",
	}[kind]
	for _, c := range calls {
		if !strings.HasPrefix(c.goType, wantType) {
			return fmt.Errorf("a %s informer handed %s, want %s", kind, c.goType, wantType)
		}
		if kind != metadataInformer && c.data != c.v {
			return fmt.Errorf("%v has data v=%q: the object lost its data", c, c.data)
		}
	}
	return nil
}

// allAdded: every named object has had an add.
func allAdded(names []string) func([]informed) bool {
	return func(calls []informed) bool {
		for _, n := range names {
			if !hasCall("add", n)(calls) {
				return false
			}
		}
		return true
	}
}

// splitStart takes off the adds of the objects that were there before the informer started (pre)
// and returns the calls after them. They come as initial adds; an object the initial LIST missed
// comes as a plain add right after: legal for client-go's LIST at resourceVersion=0 (any state,
// possibly stale, as a cache's is), not for a WatchList that was served (consistent; see
// consistentStart). note says which came late.
func splitStart(calls []informed, pre []string, consistent bool) (after []informed, note string, err error) {
	var initial, late []string
	i := 0
	for ; i < len(calls) && calls[i].op == "add" && calls[i].initial; i++ {
		initial = append(initial, calls[i].name)
	}
	for ; i < len(calls) && calls[i].op == "add" && slices.Contains(pre, calls[i].name) && !slices.Contains(initial, calls[i].name); i++ {
		late = append(late, calls[i].name)
	}
	got := slices.Sorted(slices.Values(append(slices.Clone(initial), late...)))
	if !slices.Equal(got, pre) {
		return nil, "", fmt.Errorf("the objects there before the informer: adds of %v, want %v (calls: %v)", got, pre, calls)
	}
	if len(late) > 0 {
		if consistent {
			return nil, "", fmt.Errorf("WatchList's initial events missed %v (they came later as adds; calls: %v)", late, calls)
		}
		note = fmt.Sprintf("; the initial LIST (resourceVersion=0) was stale: %v came by the watch", late)
	}
	return calls[i:], note, nil
}

// storeNames is the sorted names in an informer's store.
func storeNames(inf cache.SharedIndexInformer) []string {
	var names []string
	for _, o := range inf.GetStore().List() {
		if m, err := meta.Accessor(o); err == nil {
			names = append(names, m.GetName())
		}
	}
	slices.Sort(names)
	return names
}

// consistentStart: whether an informer's start must hold every object there was (splitStart's
// watchList): WatchList asked and no LIST of the collection made. A server that refuses WatchList
// (kube-apiserver on an etcd without progress requests) has client-go fall back to a LIST at
// resourceVersion=0, which may be stale; requestMode judges whether that fallback was allowed.
func consistentStart(xs []exchange, collection, selector string, watchList bool) bool {
	if !watchList {
		return false
	}
	for _, x := range xs {
		if x.list(collection) && (x.query.Get("labelSelector") == selector || x.query.Get("fieldSelector") == selector) {
			return false
		}
	}
	return true
}

// requestMode tells from the exchanges of one informer's collection whether its reflector used
// WatchList (a watch with sendInitialEvents and no LIST) or LIST then WATCH, and fails when it
// was not the one asked for: client-go falls back from a refused WatchList to LIST silently (a
// fallback passes only when WatchList is not required).
func requestMode(xs []exchange, collection, selector string, watchList, required bool) (string, error) {
	var mine []exchange
	for _, x := range xs {
		if x.path == collection && (x.query.Get("labelSelector") == selector || x.query.Get("fieldSelector") == selector) {
			mine = append(mine, x)
		}
	}
	var lists, watchLists, watches []exchange
	for _, x := range mine {
		switch {
		case x.list(collection):
			lists = append(lists, x)
		case x.watchList():
			watchLists = append(watchLists, x)
		case x.watch():
			watches = append(watches, x)
		}
	}
	describe := func(xs []exchange) string {
		var s []string
		for _, x := range xs {
			s = append(s, x.String())
		}
		return strings.Join(s, " | ")
	}
	if watchList {
		if len(watchLists) > 0 && len(lists) > 0 && len(watches) > 0 && !required {
			return "WatchList refused, client-go fell back to LIST then WATCH: " + describe(mine), nil
		}
		if len(watchLists) == 0 || len(lists) > 0 || watchLists[0].status != 200 {
			return "", fmt.Errorf("WatchListClient on: want one WatchList request answered 200 and no LIST; requests: %s", describe(mine))
		}
		return "WatchList: " + watchLists[0].String(), nil
	}
	if len(lists) == 0 || len(watches) == 0 || len(watchLists) > 0 {
		return "", fmt.Errorf("WatchListClient off: want a LIST then a WATCH; requests: %s", describe(mine))
	}
	return "LIST: " + lists[0].String() + " | WATCH: " + watches[0].String(), nil
}

// informerLifecycle: an informer syncs the objects there are, then sees a create, an update and a
// delete, in order, and its store ends as the server's state.
func (e *env) informerLifecycle(ctx context.Context, kind informerKind, watchList bool) (string, error) {
	id := fmt.Sprintf("%s-%v", kind, watchList)
	c := e.cs.CoreV1().ConfigMaps(e.ns)
	var pre []string
	for i := range 3 {
		cm := configMaps.make(fmt.Sprintf("inf-%s-pre-%d", id, i), "0")
		cm.Labels["inf"] = id
		if _, err := c.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return "", fmt.Errorf("create: %w", err)
		}
		pre = append(pre, cm.Name)
	}
	selector := "inf=" + id
	mark := e.rec.mark()
	h := &handlerLog{}
	s, err := e.startInformer(ctx, kind, "configmaps", 0, watchList, func(o *metav1.ListOptions) { o.LabelSelector = selector }, h)
	if err != nil {
		return "", err
	}
	defer s.stop()
	calls, err := h.wait(ctx, "initial adds", allAdded(pre))
	if err != nil {
		return "", err
	}
	strict := consistentStart(e.rec.since(mark), "/api/v1/namespaces/"+e.ns+"/configmaps", selector, watchList)
	if _, _, err := splitStart(calls, pre, strict); err != nil {
		return "", err
	}
	name := "inf-" + id + "-new"
	cm := configMaps.make(name, "1")
	cm.Labels["inf"] = id
	created, err := c.Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create: %w", err)
	}
	configMaps.set(created, "2")
	if _, err := c.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		return "", fmt.Errorf("update: %w", err)
	}
	if err := c.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return "", fmt.Errorf("delete: %w", err)
	}
	calls, err = h.wait(ctx, "the delete", hasCall("delete", name))
	if err != nil {
		return "", err
	}
	after, note, err := splitStart(calls, pre, strict)
	if err != nil {
		return "", err
	}
	if err := expectCalls(kind, after,
		informed{op: "add", name: name, v: "1"},
		informed{op: "update", name: name, v: "2"},
		informed{op: "delete", name: name, v: "2"},
	); err != nil {
		return "", err
	}
	if got := storeNames(s.informer); !slices.Equal(got, pre) {
		return "", fmt.Errorf("the store holds %v, want %v", got, pre)
	}
	if err := checkObjects(kind, calls); err != nil {
		return "", err
	}
	mode, err := requestMode(e.rec.since(mark), "/api/v1/namespaces/"+e.ns+"/configmaps", selector, watchList, e.watchListRequired)
	return mode + note, err
}

// informerFieldSelector: a kubelet's informer (pods of one node) holds and sees that node's pods
// only.
func (e *env) informerFieldSelector(ctx context.Context, watchList bool) (string, error) {
	c := e.cs.CoreV1().Pods(e.ns)
	suffix := strconv.FormatBool(watchList)
	nodeA, nodeB := e.ns+"-inf-a-"+suffix, e.ns+"-inf-b-"+suffix
	preA, preB := "fs-a-pre-"+suffix, "fs-b-pre-"+suffix
	newA, newB := "fs-a-new-"+suffix, "fs-b-new-"+suffix
	for _, p := range []*corev1.Pod{pod(preA, nodeA, map[string]string{"v": "0"}), pod(preB, nodeB, map[string]string{"v": "0"})} {
		if _, err := c.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return "", fmt.Errorf("create %s: %w", p.Name, err)
		}
	}
	selector := "spec.nodeName=" + nodeA
	mark := e.rec.mark()
	h := &handlerLog{}
	s, err := e.startInformer(ctx, typedInformer, "pods", 0, watchList, func(o *metav1.ListOptions) { o.FieldSelector = selector }, h)
	if err != nil {
		return "", err
	}
	defer s.stop()
	calls, err := h.wait(ctx, "initial adds", allAdded([]string{preA}))
	if err != nil {
		return "", err
	}
	strict := consistentStart(e.rec.since(mark), "/api/v1/namespaces/"+e.ns+"/pods", selector, watchList)
	if _, _, err := splitStart(calls, []string{preA}, strict); err != nil {
		return "", err
	}
	if _, err := c.Create(ctx, pod(newB, nodeB, map[string]string{"v": "1"}), metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create %s: %w", newB, err)
	}
	created, err := c.Create(ctx, pod(newA, nodeA, map[string]string{"v": "1"}), metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create %s: %w", newA, err)
	}
	created.Labels["v"] = "2"
	if _, err := c.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		return "", fmt.Errorf("update: %w", err)
	}
	for _, n := range []string{newB, newA} {
		if err := c.Delete(ctx, n, pods.del); err != nil {
			return "", fmt.Errorf("delete %s: %w", n, err)
		}
	}
	calls, err = h.wait(ctx, "the delete", hasCall("delete", newA))
	if err != nil {
		return "", err
	}
	after, note, err := splitStart(calls, []string{preA}, strict)
	if err != nil {
		return "", err
	}
	for i := range after {
		after[i].data = after[i].v // pods carry no data key
	}
	// Deleting a bound pod sets its deletionTimestamp first (see watchNodeName).
	if err := expectCalls(typedInformer, after,
		informed{op: "add", name: newA, v: "1"},
		informed{op: "update", name: newA, v: "2"},
		informed{op: "update", name: newA, v: "2", deleting: true},
		informed{op: "delete", name: newA, v: "2"},
	); err != nil {
		return "", err
	}
	if got := storeNames(s.informer); !slices.Equal(got, []string{preA}) {
		return "", fmt.Errorf("the store holds %v, want [%s]", got, preA)
	}
	mode, err := requestMode(e.rec.since(mark), "/api/v1/namespaces/"+e.ns+"/pods", selector, watchList, e.watchListRequired)
	return mode + note, err
}

// informerLabelSelector: an object entering an informer's label selector is added, and leaving
// it deleted.
func (e *env) informerLabelSelector(ctx context.Context, watchList bool) (string, error) {
	c := e.cs.CoreV1().ConfigMaps(e.ns)
	suffix := strconv.FormatBool(watchList)
	blue, red := "ls-blue-"+suffix, "ls-red-"+suffix
	for n, color := range map[string]string{blue: "blue", red: "red"} {
		cm := configMaps.make(n, "0")
		cm.Labels["ls"], cm.Labels["color"] = suffix, color
		if _, err := c.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return "", fmt.Errorf("create %s: %w", n, err)
		}
	}
	selector := "color=blue,ls=" + suffix
	mark := e.rec.mark()
	h := &handlerLog{}
	s, err := e.startInformer(ctx, typedInformer, "configmaps", 0, watchList, func(o *metav1.ListOptions) { o.LabelSelector = selector }, h)
	if err != nil {
		return "", err
	}
	defer s.stop()
	calls, err := h.wait(ctx, "initial adds", allAdded([]string{blue}))
	if err != nil {
		return "", err
	}
	strict := consistentStart(e.rec.since(mark), "/api/v1/namespaces/"+e.ns+"/configmaps", selector, watchList)
	if _, _, err := splitStart(calls, []string{blue}, strict); err != nil {
		return "", err
	}
	cur, err := c.Get(ctx, red, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("get: %w", err)
	}
	for i, color := range []string{"blue", "blue", "red"} {
		cur.Labels["color"] = color
		configMaps.set(cur, strconv.Itoa(i+1))
		if cur, err = c.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return "", fmt.Errorf("update to %s: %w", color, err)
		}
	}
	calls, err = h.wait(ctx, "the delete", hasCall("delete", red))
	if err != nil {
		return "", err
	}
	after, note, err := splitStart(calls, []string{blue}, strict)
	if err != nil {
		return "", err
	}
	if err := expectCalls(typedInformer, after,
		informed{op: "add", name: red, v: "1"},
		informed{op: "update", name: red, v: "2"},
		informed{op: "delete", name: red, v: "2"},
	); err != nil {
		return "", err
	}
	if got := storeNames(s.informer); !slices.Equal(got, []string{blue}) {
		return "", fmt.Errorf("the store holds %v, want [%s]", got, blue)
	}
	mode, err := requestMode(e.rec.since(mark), "/api/v1/namespaces/"+e.ns+"/configmaps", selector, watchList, e.watchListRequired)
	return mode + note, err
}

// informerResync: with a resync period, the handler is called again for each object it holds,
// without a new resourceVersion.
func (e *env) informerResync(ctx context.Context) (string, error) {
	c := e.cs.CoreV1().ConfigMaps(e.ns)
	cm := configMaps.make("resync-1", "0")
	cm.Labels["resync"] = "1"
	created, err := c.Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create: %w", err)
	}
	h := &handlerLog{}
	began := time.Now()
	s, err := e.startInformer(ctx, typedInformer, "configmaps", time.Second, watchListOn.Load(), func(o *metav1.ListOptions) { o.LabelSelector = "resync=1" }, h)
	if err != nil {
		return "", err
	}
	defer s.stop()
	calls, err := h.wait(ctx, "two resyncs", func(c []informed) bool {
		n := 0
		for _, i := range c {
			if i.op == "resync" {
				n++
			}
		}
		return n >= 2
	})
	if err != nil {
		return "", err
	}
	for _, i := range calls {
		if i.name != "resync-1" || (i.op != "add" && i.op != "resync") || i.rv != created.ResourceVersion {
			return "", fmt.Errorf("handler call %v, want only the add and resyncs of resync-1 at %s (all: %v)", i, created.ResourceVersion, calls)
		}
	}
	return fmt.Sprintf("%d calls in %v", len(calls), time.Since(began).Round(time.Millisecond)), nil
}
