// Command wc-shards drives client-go, unchanged, with metav1.ListOptions.ShardSelector (KEP-5866)
// against a server, once with JSON and once with protobuf, and prints one JSON line per result for
// tests/system/shards_client_go.rs, which checks each selected set with its own FNV-1a.
//
// The caller names the selectors by their ranges (--shard NAME=PATH:START-END[,START-END...], hex
// without 0x, END up to 10000000000000000); the program writes each as upstream's canonical
// expression, so the caller knows the exact string the server must echo. For each content type:
//
//   - list: a typed LIST per selector ("NAME", and "NAME+label" with --label-selector composed);
//   - error: a bad selector (--bad) on LIST and on WATCH, as client-go surfaces it;
//   - watch: a typed WATCH per --watch selector from its LIST's resourceVersion, and an informer
//     (--informer selector, WatchListClient as client-go defaults) with the selector set by a
//     tweak-list-options func, as kube-state-metrics does; then the program creates, updates and
//     deletes pods (--namespaces) and reports each change it made ("mutation") and what each
//     watcher and the informer received.
//
// Every line names the request client-go sent (its shardSelector parameter) and the content type
// of the answer, so the caller can tell the selector went on the wire and in which format. The
// program waits for the events its own hash expects (hash/fnv, as upstream's sharding.HashField),
// then a little more for any it does not; it exits 1 when client-go failed, never for a set.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// span is one hash range: start inclusive, end exclusive; full means the end is 2^64.
type span struct {
	start, end uint64
	full       bool
}

// shard is a named selector: its path, its ranges, and its canonical expression.
type shard struct {
	name  string
	path  string
	spans []span
	expr  string
}

// selects: the shard without an expression is the unsharded reference watch's.
func (s shard) selects(p *corev1.Pod) bool {
	if s.expr == "" {
		return true
	}
	v := string(p.UID)
	if s.path == "object.metadata.namespace" {
		v = p.Namespace
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(v))
	x := h.Sum64()
	for _, r := range s.spans {
		if x >= r.start && (r.full || x < r.end) {
			return true
		}
	}
	return false
}

// parseShard reads NAME=PATH:START-END[,START-END...].
func parseShard(arg string) (shard, error) {
	name, rest, ok := strings.Cut(arg, "=")
	if !ok {
		return shard{}, fmt.Errorf("--shard %q: want NAME=PATH:START-END[,START-END]", arg)
	}
	path, ranges, ok := strings.Cut(rest, ":")
	if !ok {
		return shard{}, fmt.Errorf("--shard %q: want NAME=PATH:START-END[,START-END]", arg)
	}
	s := shard{name: name, path: path}
	var calls []string
	for _, r := range strings.Split(ranges, ",") {
		a, b, ok := strings.Cut(r, "-")
		if !ok {
			return shard{}, fmt.Errorf("--shard %q: range %q is not START-END", arg, r)
		}
		start, err := strconv.ParseUint(a, 16, 64)
		if err != nil {
			return shard{}, fmt.Errorf("--shard %q: start %q: %w", arg, a, err)
		}
		sp := span{start: start}
		if b == "10000000000000000" {
			sp.full = true
		} else if sp.end, err = strconv.ParseUint(b, 16, 64); err != nil {
			return shard{}, fmt.Errorf("--shard %q: end %q: %w", arg, b, err)
		}
		end := fmt.Sprintf("0x%016x", sp.end)
		if sp.full {
			end = "0x10000000000000000"
		}
		s.spans = append(s.spans, sp)
		calls = append(calls, fmt.Sprintf("shardRange(%s, '0x%016x', '%s')", path, start, end))
	}
	s.expr = strings.Join(calls, " || ")
	return s, nil
}

type shardFlags []string

func (f *shardFlags) String() string     { return strings.Join(*f, " ") }
func (f *shardFlags) Set(v string) error { *f = append(*f, v); return nil }

// item is a pod as the lines name it.
type item struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

func itemOf(p *corev1.Pod) item { return item{p.Namespace, p.Name, string(p.UID)} }

// event is one change a watcher or the informer received, or one the program made.
type event struct {
	Type string `json:"type"`
	item
}

// line is one output line; the fields a kind does not use are left out.
type line struct {
	ContentType string `json:"ct"`
	Kind        string `json:"kind"`
	Name        string `json:"name,omitempty"`
	Selector    string `json:"selector,omitempty"`
	Label       string `json:"labelSelector,omitempty"`
	// Sent is the shardSelector parameter of the request client-go sent; Answer the content
	// type the server answered it in; WatchList whether it was a watch with sendInitialEvents.
	Sent      *string `json:"sent,omitempty"`
	Answer    string  `json:"answer,omitempty"`
	WatchList *bool   `json:"watchList,omitempty"`
	ShardInfo *string `json:"shardInfo,omitempty"`
	Items     []item  `json:"items,omitempty"`
	Events    []event `json:"events,omitempty"`
	// Of an error: whether client-go returned a *StatusError, and its Status.
	StatusError bool   `json:"statusError,omitempty"`
	Code        int32  `json:"code,omitempty"`
	Reason      string `json:"reason,omitempty"`
	Message     string `json:"message,omitempty"`
	// Of a mutation: what the program changed, as the server answered it.
	Type   string `json:"type,omitempty"`
	Object *item  `json:"object,omitempty"`
}

// exchange is what the recorder keeps of one request.
type exchange struct {
	path, accept string
	query        map[string][]string
	answer       string
}

// recorder keeps every request client-go makes, so each line can say what went on the wire.
type recorder struct {
	mu  sync.Mutex
	log []exchange
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (r *recorder) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		x := exchange{path: req.URL.Path, accept: req.Header.Get("Accept"), query: req.URL.Query()}
		if err != nil {
			x.answer = "error: " + err.Error()
		} else {
			x.answer = resp.Header.Get("Content-Type")
		}
		r.mu.Lock()
		r.log = append(r.log, x)
		r.mu.Unlock()
		return resp, err
	})
}

func (r *recorder) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.log)
}

// find is the first pod request since mark whose query passes want.
func (r *recorder) find(mark int, want func(map[string][]string) bool) (exchange, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.log[mark:] {
		if strings.HasSuffix(x.path, "/pods") && want(x.query) {
			return x, true
		}
	}
	return exchange{}, false
}

func get(q map[string][]string, k string) string {
	if v := q[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func isWatch(q map[string][]string) bool { return get(q, "watch") == "true" || get(q, "watch") == "1" }

// run is one content type's pass.
type run struct {
	ctx       context.Context
	ct        string
	cs        kubernetes.Interface
	rec       *recorder
	out       *json.Encoder
	wait      time.Duration
	shards    map[string]shard
	label     string
	bad       string
	watches   []string
	informer  string
	namespace []string
	pods      int
}

// sent fills a line's Sent and Answer from the request since mark that want picks.
func (r *run) sent(l *line, mark int, want func(map[string][]string) bool) error {
	x, ok := r.rec.find(mark, want)
	if !ok {
		return fmt.Errorf("%s %s %s: client-go sent no such request", r.ct, l.Kind, l.Name)
	}
	s := get(x.query, "shardSelector")
	l.Sent, l.Answer = &s, x.answer
	wl := isWatch(x.query) && get(x.query, "sendInitialEvents") == "true"
	if isWatch(x.query) {
		l.WatchList = &wl
	}
	return nil
}

func (r *run) emit(l line) {
	l.ContentType = r.ct
	_ = r.out.Encode(l)
}

func (r *run) lists() error {
	for _, name := range slices.Sorted(maps.Keys(r.shards)) {
		s := r.shards[name]
		for _, label := range []string{"", r.label} {
			l := line{Kind: "list", Name: name, Selector: s.expr, Label: label}
			if label != "" {
				l.Name += "+label"
			}
			mark := r.rec.mark()
			list, err := r.cs.CoreV1().Pods("").List(r.ctx, metav1.ListOptions{ShardSelector: s.expr, LabelSelector: label})
			if err != nil {
				return fmt.Errorf("%s list %s: %w", r.ct, l.Name, err)
			}
			if err := r.sent(&l, mark, func(q map[string][]string) bool { return !isWatch(q) }); err != nil {
				return err
			}
			if list.ShardInfo != nil {
				l.ShardInfo = &list.ShardInfo.Selector
			}
			l.Items = []item{}
			for i := range list.Items {
				l.Items = append(l.Items, itemOf(&list.Items[i]))
			}
			r.emit(l)
		}
	}
	return nil
}

// badSelector: a bad selector, on LIST and on WATCH, as client-go returns it.
func (r *run) badSelector() error {
	for _, kind := range []string{"list", "watch"} {
		opts := metav1.ListOptions{ShardSelector: r.bad}
		var err error
		if kind == "list" {
			_, err = r.cs.CoreV1().Pods("").List(r.ctx, opts)
		} else {
			var w watch.Interface
			if w, err = r.cs.CoreV1().Pods("").Watch(r.ctx, opts); err == nil {
				w.Stop()
			}
		}
		if err == nil {
			return fmt.Errorf("%s %s with the bad selector %q: no error", r.ct, kind, r.bad)
		}
		l := line{Kind: "error", Name: kind, Selector: r.bad, Message: err.Error()}
		var se *apierrors.StatusError
		if errors.As(err, &se) {
			st := se.Status()
			l.StatusError, l.Code, l.Reason, l.Message = true, st.Code, string(st.Reason), st.Message
		}
		r.emit(l)
	}
	return nil
}

// watcher collects the events of one watch or of the informer.
type watcher struct {
	name   string
	shard  shard
	mu     sync.Mutex
	events []event
}

func (w *watcher) add(typ string, p *corev1.Pod) {
	w.mu.Lock()
	w.events = append(w.events, event{typ, itemOf(p)})
	w.mu.Unlock()
}

func (w *watcher) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.events)
}

func (w *watcher) take() []event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]event{}, w.events...)
}

func (r *run) watch() error {
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	var all []*watcher
	var lines []line
	// "all", without a selector, is the reference: what an unsharded watcher gets of the same
	// changes (a pod's delete is a MODIFIED with its deletionTimestamp, then DELETED).
	for _, name := range append([]string{"all"}, r.watches...) {
		s := r.shards[name]
		s.name = name
		w := &watcher{name: name, shard: s}
		list, err := r.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{ShardSelector: s.expr})
		if err != nil {
			return fmt.Errorf("%s list before watch %s: %w", r.ct, name, err)
		}
		mark := r.rec.mark()
		wi, err := r.cs.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{ShardSelector: s.expr, ResourceVersion: list.ResourceVersion})
		if err != nil {
			return fmt.Errorf("%s watch %s: %w", r.ct, name, err)
		}
		defer wi.Stop()
		l := line{Kind: "watch", Name: name, Selector: s.expr}
		if err := r.sent(&l, mark, isWatch); err != nil {
			return err
		}
		go func() {
			for ev := range wi.ResultChan() {
				if p, ok := ev.Object.(*corev1.Pod); ok {
					w.add(string(ev.Type), p)
				} else {
					w.add(string(ev.Type), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("not a pod: %T %v", ev.Object, ev.Object)}})
				}
			}
		}()
		all = append(all, w)
		lines = append(lines, l)
	}

	// The informer: a factory whose tweak sets the selector, as kube-state-metrics does.
	s := r.shards[r.informer]
	inf := &watcher{name: r.informer, shard: s}
	mark := r.rec.mark()
	factory := informers.NewSharedInformerFactoryWithOptions(r.cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.ShardSelector = s.expr }))
	pods := factory.Core().V1().Pods().Informer()
	pod := func(obj any) *corev1.Pod {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		p, _ := obj.(*corev1.Pod)
		if p == nil {
			p = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("not a pod: %T", obj)}}
		}
		return p
	}
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { inf.add("ADDED", pod(obj)) },
		UpdateFunc: func(_, obj any) { inf.add("MODIFIED", pod(obj)) },
		DeleteFunc: func(obj any) { inf.add("DELETED", pod(obj)) },
	}); err != nil {
		return fmt.Errorf("%s informer handler: %w", r.ct, err)
	}
	factory.Start(ctx.Done())
	// Shutdown waits for the informer's goroutines, which end when ctx does.
	defer func() {
		cancel()
		factory.Shutdown()
	}()
	syncCtx, syncCancel := context.WithTimeout(ctx, r.wait)
	synced := cache.WaitForCacheSync(syncCtx.Done(), pods.HasSynced)
	syncCancel()
	if !synced {
		return fmt.Errorf("%s informer %s: not synced within %v", r.ct, r.informer, r.wait)
	}
	il := line{Kind: "informer", Name: r.informer, Selector: s.expr}
	// The informer's first request: a WatchList when client-go's WatchListClient is on.
	if err := r.sent(&il, mark, func(map[string][]string) bool { return true }); err != nil {
		return err
	}
	initial := inf.take()
	il.Items = []item{}
	for _, e := range initial {
		il.Items = append(il.Items, e.item)
	}
	inf.mu.Lock()
	inf.events = nil
	inf.mu.Unlock()

	// The changes, after every watcher started: each pod created, updated, deleted.
	var made []event
	for i := 0; i < r.pods; i++ {
		ns := r.namespace[i%len(r.namespace)]
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w-%s-%d", r.ct, i), Labels: map[string]string{"app": "w"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1"}}},
		}
		created, err := r.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("%s create %s/%s: %w", r.ct, ns, p.Name, err)
		}
		made = append(made, event{"ADDED", itemOf(created)})
		created.Annotations = map[string]string{"step": "updated"}
		updated, err := r.cs.CoreV1().Pods(ns).Update(ctx, created, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("%s update %s/%s: %w", r.ct, ns, p.Name, err)
		}
		made = append(made, event{"MODIFIED", itemOf(updated)})
		zero := int64(0)
		if err := r.cs.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			return fmt.Errorf("%s delete %s/%s: %w", r.ct, ns, p.Name, err)
		}
		made = append(made, event{"DELETED", itemOf(updated)})
	}
	for _, m := range made {
		it := m.item
		r.emit(line{Kind: "mutation", Type: m.Type, Object: &it})
	}
	// The reference's events, each pod's up to its DELETED; then what this program's hash picks
	// of them for each watcher; then a little more for any event it does not expect.
	deadline := time.Now().Add(r.wait)
	ref := all[0]
	deleted := func() int {
		n := 0
		for _, e := range ref.take() {
			if e.Type == "DELETED" {
				n++
			}
		}
		return n
	}
	for deleted() < r.pods && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	for _, w := range append(all[1:], inf) {
		want := 0
		for _, e := range ref.take() {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, UID: types.UID(e.UID)}}
			if w.shard.selects(p) {
				want++
			}
		}
		for w.count() < want && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	time.Sleep(500 * time.Millisecond)
	for i, w := range all {
		lines[i].Events = w.take()
		r.emit(lines[i])
	}
	il.Events = inf.take()
	r.emit(il)
	return nil
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the server (required)")
	var shardArgs shardFlags
	flag.Var(&shardArgs, "shard", "a selector: NAME=PATH:START-END[,START-END...] (hex, no 0x); repeat")
	label := flag.String("label-selector", "", "a label selector each list also composes with its shard selector")
	bad := flag.String("bad", "", "a selector the server must refuse")
	watches := flag.String("watch", "", "comma-separated shard names to WATCH")
	informer := flag.String("informer", "", "the shard name of the informer")
	namespaces := flag.String("namespaces", "a,b", "comma-separated namespaces the program writes pods into")
	pods := flag.Int("pods", 12, "how many pods each pass creates, updates and deletes")
	timeout := flag.Duration("timeout", 20*time.Second, "time limit of a wait")
	flag.Parse()

	fail := func(err error) {
		fmt.Fprintf(os.Stderr, "wc-shards: %v\n", err)
		os.Exit(1)
	}
	if *kubeconfig == "" || *bad == "" || *informer == "" {
		fail(errors.New("--kubeconfig, --bad and --informer are required"))
	}
	shards := map[string]shard{}
	for _, a := range shardArgs {
		s, err := parseShard(a)
		if err != nil {
			fail(err)
		}
		shards[s.name] = s
	}
	var watchNames []string
	if *watches != "" {
		watchNames = strings.Split(*watches, ",")
	}
	for _, n := range append(watchNames, *informer) {
		if _, ok := shards[n]; !ok {
			fail(fmt.Errorf("no --shard named %q", n))
		}
	}
	base, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	out := json.NewEncoder(os.Stdout)
	for _, ct := range []string{"json", "protobuf"} {
		cfg := rest.CopyConfig(base)
		// Said both ways: the typed clientset of v0.36 asks for protobuf when a config names
		// no content type.
		if ct == "protobuf" {
			cfg.ContentType = "application/vnd.kubernetes.protobuf"
		} else {
			cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
		}
		rec := &recorder{}
		cfg.Wrap(rec.wrap)
		cfg.Timeout = *timeout
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			fail(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 4*(*timeout))
		r := &run{ctx: ctx, ct: ct, cs: cs, rec: rec, out: out, wait: *timeout, shards: shards,
			label: *label, bad: *bad, watches: watchNames, informer: *informer,
			namespace: strings.Split(*namespaces, ","), pods: *pods}
		for _, step := range []func() error{r.lists, r.badSelector, r.watch} {
			if err := step(); err != nil {
				cancel()
				fail(err)
			}
		}
		cancel()
	}
}
