// Command wc-conformance runs client-go, unchanged, against an API server (kube-apiserver itself,
// or watchcache in front of etcd or of a kube-apiserver) and prints one JSON line per check:
// {"check": ..., "ok": ..., "detail": ...}. It exits 1 when any check failed.
//
// It writes through the server it is given, in a namespace of its own (wcc-XXXXX), and judges
// what client-go's typed clients (protobuf), watches, informers (typed, metadata and dynamic,
// with WatchListClient on and off), selectors, bookmarks and resyncs make of the answers. A
// failed check's detail names the requests that went wrong and what the server answered.
//
// Run it against kube-apiserver first: a check that fails there is a bug of this program.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// result is one output line.
type result struct {
	Check  string `json:"check"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// env is what every check shares: the clients (all through one recording transport), the
// namespace, and the time limit of one check.
type env struct {
	ctx context.Context
	// cfg is the admin's, through the recording transport: impersonating checks copy it.
	cfg     *rest.Config
	cs      kubernetes.Interface
	dyn     dynamic.Interface
	meta    metadata.Interface
	rec     *recorder
	ns      string
	timeout time.Duration
	only    string
	// watchListRequired: a refused WatchList fails the checks. Without it, a server may refuse
	// (kube-apiserver does on an etcd without working progress requests, < 3.4.31 or < 3.5.13)
	// and the checks then judge client-go's fallback to LIST.
	watchListRequired bool
	failed            int
	out               *json.Encoder
}

// watchListOn is what client-go's WatchListClient gate answers; the informer checks switch it.
var watchListOn atomic.Bool

// switchableGates is client-go's feature gates with WatchListClient switchable at run time
// (reflectors read it when they are made, so each informer check can pick the mode).
type switchableGates struct{ base clientfeatures.Gates }

func (g switchableGates) Enabled(key clientfeatures.Feature) bool {
	if key == clientfeatures.WatchListClient {
		return watchListOn.Load()
	}
	return g.base.Enabled(key)
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the server to check (required)")
	timeout := flag.Duration("timeout", 60*time.Second, "time limit of one check")
	only := flag.String("only", "", "run only the checks whose name contains this")
	keep := flag.Bool("keep", false, "keep the namespace afterwards")
	watchList := flag.String("watchlist", "required", "required: the server must serve WatchList; optional: it may refuse it (client-go then falls back to LIST)")
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	verbosity := flag.String("v", "0", "client-go's log verbosity (klog -v), logs on stderr")
	flag.Parse()
	if *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "wc-conformance: --kubeconfig is required")
		os.Exit(2)
	}
	_ = klogFlags.Set("v", *verbosity)

	base := clientfeatures.FeatureGates()
	clientfeatures.ReplaceFeatureGates(switchableGates{base})
	// The environment's choice (KUBE_FEATURE_WatchListClient) for the checks that do not pick.
	watchListOn.Store(base.Enabled(clientfeatures.WatchListClient))

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "wc-conformance: %v\n", err)
		os.Exit(2)
	}
	rec := &recorder{}
	cfg.Wrap(rec.wrap)
	cfg.QPS, cfg.Burst = 200, 400
	cfg.Timeout = *timeout

	if *watchList != "required" && *watchList != "optional" {
		fmt.Fprintf(os.Stderr, "wc-conformance: --watchlist is required or optional, not %q\n", *watchList)
		os.Exit(2)
	}
	e := &env{
		watchListRequired: *watchList == "required",
		ctx:               context.Background(),
		cfg:               cfg,
		rec:               rec,
		ns:                fmt.Sprintf("wcc-%05d", rand.IntN(100000)),
		timeout:           *timeout,
		only:              *only,
		out:               json.NewEncoder(os.Stdout),
	}
	e.cs = kubernetes.NewForConfigOrDie(cfg)
	e.dyn = dynamic.NewForConfigOrDie(cfg)
	e.meta = metadata.NewForConfigOrDie(cfg)

	if !e.run("setup/namespace", e.setup) {
		os.Exit(1)
	}
	for _, c := range checks(e) {
		e.run(c.name, c.fn)
	}
	if !*keep {
		// Best effort: kube-apiserver without kube-controller-manager leaves it Terminating.
		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		_ = e.cs.CoreV1().Namespaces().Delete(ctx, e.ns, metav1.DeleteOptions{})
		cancel()
	}
	if e.failed > 0 {
		fmt.Fprintf(os.Stderr, "wc-conformance: %d checks failed\n", e.failed)
		os.Exit(1)
	}
}

type check struct {
	name string
	fn   func(context.Context) (string, error)
}

func checks(e *env) []check {
	cs := []check{
		{"discovery/version", e.version},
		{"typed/serviceaccounts/create", e.serviceAccount},
		{"typed/configmaps/crud", e.configMapsCRUD},
		{"typed/secrets/crud", e.secretsCRUD},
		{"typed/pods/crud", e.podsCRUD},
		{"typed/list/paged", e.listPaged},
		{"typed/list/resourceVersion=0", e.listRV0},
		{"typed/watch/configmaps", e.watchConfigMaps},
		{"select/list/pods", e.selectList},
		{"select/watch/field/spec.nodeName", e.watchNodeName},
		{"select/watch/field/metadata.name", e.watchMetadataName},
		{"select/watch/label/transitions", e.watchLabelTransitions},
		{"watch/bookmarks", e.bookmarks},
		{"watch/watchlist/initial-events-end", e.watchListRaw},
	}
	for _, on := range []bool{true, false} {
		for _, kind := range []informerKind{typedInformer, metadataInformer, dynamicInformer} {
			cs = append(cs, check{
				fmt.Sprintf("informer/%s/watchlist=%v", kind, on),
				func(ctx context.Context) (string, error) { return e.informerLifecycle(ctx, kind, on) },
			})
		}
		cs = append(cs,
			check{fmt.Sprintf("informer/typed/field-selector/watchlist=%v", on),
				func(ctx context.Context) (string, error) { return e.informerFieldSelector(ctx, on) }},
			check{fmt.Sprintf("informer/typed/label-selector/watchlist=%v", on),
				func(ctx context.Context) (string, error) { return e.informerLabelSelector(ctx, on) }},
		)
	}
	cs = append(cs, check{"informer/typed/resync", e.informerResync})
	cs = append(cs, check{"informer/typed/narrow-user/watchlist=true", e.informerNarrowUser})
	cs = append(cs, check{"informer/typed/node/watchlist=true", e.informerNode})
	cs = append(cs, check{"informer/dynamic/crd-field-selector", e.informerCRDFieldSelector})
	return cs
}

// run runs one check with its time limit and prints its line; false when it failed.
func (e *env) run(name string, fn func(context.Context) (string, error)) bool {
	if e.only != "" && !strings.Contains(name, e.only) && name != "setup/namespace" {
		return true
	}
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	defer cancel()
	mark := e.rec.mark()
	detail, err := func() (detail string, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
			}
		}()
		return fn(ctx)
	}()
	r := result{Check: name, OK: err == nil, Detail: detail}
	if err != nil {
		e.failed++
		r.Detail = err.Error()
		if detail != "" {
			r.Detail += "; " + detail
		}
		if bad := e.rec.failures(mark); bad != "" {
			r.Detail += "; error answers (some may be expected): " + bad
		}
	}
	_ = e.out.Encode(r)
	return err == nil
}

func (e *env) setup(ctx context.Context) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns, Labels: map[string]string{"wc-conformance": "true"}}}
	if _, err := e.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create namespace %s: %w", e.ns, err)
	}
	return e.ns, nil
}

// serviceAccount: kube-apiserver admits pods only with their service account, which
// kube-controller-manager makes when it runs.
func (e *env) serviceAccount(ctx context.Context) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := e.cs.CoreV1().ServiceAccounts(e.ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create service account default: %w", err)
	}
	return "", nil
}

func (e *env) version(ctx context.Context) (string, error) {
	v, err := e.cs.Discovery().ServerVersion()
	if err != nil {
		return "", err
	}
	if v.Major == "" || v.Minor == "" {
		return "", fmt.Errorf("version without major or minor: %+v", v)
	}
	return v.GitVersion, nil
}
