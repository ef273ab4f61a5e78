//! Model-based property test: random creates, updates, deletes, node moves and relabels (some in
//! multi-change transactions sharing one revision), random watchers (selectors, start points,
//! sendInitialEvents, slow or fast consumption, tiny queues that force parking), and random LISTs
//! (paged or not, current or exact), all checked against a naive model that filters the full history.
//! Selections include `shardSelector`s (uid and namespace ranges, OR-ed, composed with a field
//! selector); a Put gives a pod a new uid, so an event's previous and new uid hashes can differ.
//!
//! `PROPTEST_CASES` sets the number of cases (default 256).

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use proptest::prelude::*;
use watchcache::{
    Cache, CacheConfig, Error, EventType, FieldPath, HistoryConfig, ListOptions, MemorySource,
    ResourceDef, ResourceVersion, RvMatch, Selection, WatchOptions, WatchStream,
};

const NAMES: [&str; 6] = ["a", "b", "c", "d", "e", "f"];
const NODES: [&str; 3] = ["n0", "n1", "n2"];
const APPS: [Option<&str>; 3] = [Some("web"), Some("db"), None];

#[derive(Debug, Clone, PartialEq, Eq)]
struct Pod {
    ns: &'static str,
    name: &'static str,
    node: &'static str,
    app: Option<&'static str>,
    tier: bool,
    /// A counter so that updates change the bytes.
    generation: u32,
    /// The uid is `u-{uid}`: set anew by each Put (a recreation), kept by moves and relabels.
    uid: u32,
}

/// FNV-1a 64 from its definition, independently of the crate's: what a shard range hashes.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

/// The `shardRange` of quarter `q` of the hash space.
fn quarter(path: &str, q: u64) -> String {
    let end = if q == 3 {
        "0x10000000000000000".to_owned()
    } else {
        format!("0x{:016x}", (q + 1) << 62)
    };
    format!("shardRange({path}, '0x{:016x}', '{end}')", q << 62)
}

impl Pod {
    fn key(&self) -> String {
        format!("/registry/pods/{}/{}", self.ns, self.name)
    }

    fn json(&self) -> String {
        let mut labels = Vec::new();
        if let Some(a) = self.app {
            labels.push(format!("\"app\":\"{a}\""));
        }
        if self.tier {
            labels.push("\"tier\":\"x\"".to_owned());
        }
        format!(
            r#"{{"metadata":{{"name":"{}","namespace":"{}","uid":"u-{}","labels":{{{}}}}},"spec":{{"nodeName":"{}","gen":{}}}}}"#,
            self.name,
            self.ns,
            self.uid,
            labels.join(","),
            self.node,
            self.generation
        )
    }
}

#[derive(Debug, Clone, Copy)]
enum Sel {
    All,
    Node(usize),
    App(usize),
    AppIn,
    NsA,
    TierExists,
    NodeNot(usize),
    NodeAndApp(usize, usize),
    NsAAndNode(usize),
    NoApp,
    Name(usize),
    Generation,
    /// Quarter q of the uid hash space.
    ShardUid(u64),
    /// Quarters 0 and 2 of the uid hash space, OR-ed.
    ShardUidOr,
    /// Half h of the namespace hash space.
    ShardNs(u64),
    /// Quarter q of the uid hash space and a node.
    ShardAndNode(u64, usize),
}

impl Sel {
    fn selection(self) -> Selection {
        let (ns, f, l) = match self {
            Sel::All => (None, String::new(), String::new()),
            Sel::Node(n) => (None, format!("spec.nodeName={}", NODES[n]), String::new()),
            Sel::App(a) => (
                None,
                String::new(),
                format!("app={}", APPS[a].unwrap_or("web")),
            ),
            Sel::AppIn => (None, String::new(), "app in (web,db)".into()),
            Sel::NsA => (Some("a"), String::new(), String::new()),
            Sel::TierExists => (None, String::new(), "tier".into()),
            Sel::NodeNot(n) => (None, format!("spec.nodeName!={}", NODES[n]), String::new()),
            Sel::NodeAndApp(n, a) => (
                None,
                format!("spec.nodeName=={}", NODES[n]),
                format!("app={}", APPS[a].unwrap_or("db")),
            ),
            Sel::NsAAndNode(n) => (
                Some("a"),
                format!("spec.nodeName={}", NODES[n]),
                String::new(),
            ),
            Sel::NoApp => (None, String::new(), "!app".into()),
            Sel::Name(i) => (None, format!("metadata.name={}", NAMES[i]), String::new()),
            Sel::Generation => (None, "spec.gen!=0".into(), String::new()),
            Sel::ShardAndNode(_, n) => (None, format!("spec.nodeName={}", NODES[n]), String::new()),
            Sel::ShardUid(_) | Sel::ShardUidOr | Sel::ShardNs(_) => {
                (None, String::new(), String::new())
            }
        };
        let s = Selection::parse(ns, &f, &l).unwrap();
        let uid = "object.metadata.uid";
        let shard = match self {
            Sel::ShardUid(q) | Sel::ShardAndNode(q, _) => quarter(uid, q),
            Sel::ShardUidOr => format!("{} || ({})", quarter(uid, 2), quarter(uid, 0)),
            Sel::ShardNs(h) => format!(
                "{} || {}",
                quarter("object.metadata.namespace", 2 * h),
                quarter("object.metadata.namespace", 2 * h + 1)
            ),
            _ => return s,
        };
        s.with_shard(&shard).unwrap()
    }

    fn matches(self, p: &Pod) -> bool {
        match self {
            Sel::All => true,
            Sel::Node(n) => p.node == NODES[n],
            Sel::App(a) => p.app == Some(APPS[a].unwrap_or("web")),
            Sel::AppIn => p.app.is_some(),
            Sel::NsA => p.ns == "a",
            Sel::TierExists => p.tier,
            Sel::NodeNot(n) => p.node != NODES[n],
            Sel::NodeAndApp(n, a) => p.node == NODES[n] && p.app == Some(APPS[a].unwrap_or("db")),
            Sel::NsAAndNode(n) => p.ns == "a" && p.node == NODES[n],
            Sel::NoApp => p.app.is_none(),
            Sel::Name(i) => p.name == NAMES[i],
            Sel::Generation => p.generation != 0,
            Sel::ShardUid(q) => fnv(&format!("u-{}", p.uid)) >> 62 == q,
            Sel::ShardUidOr => fnv(&format!("u-{}", p.uid)) >> 62 & 1 == 0,
            Sel::ShardNs(h) => fnv(p.ns) >> 63 == h,
            Sel::ShardAndNode(q, n) => {
                fnv(&format!("u-{}", p.uid)) >> 62 == q && p.node == NODES[n]
            }
        }
    }
}

fn sel_strategy() -> impl Strategy<Value = Sel> {
    prop_oneof![
        Just(Sel::All),
        (0..3usize).prop_map(Sel::Node),
        (0..3usize).prop_map(Sel::App),
        Just(Sel::AppIn),
        Just(Sel::NsA),
        Just(Sel::TierExists),
        (0..3usize).prop_map(Sel::NodeNot),
        (0..3usize, 0..3usize).prop_map(|(n, a)| Sel::NodeAndApp(n, a)),
        (0..3usize).prop_map(Sel::NsAAndNode),
        Just(Sel::NoApp),
        (0..6usize).prop_map(Sel::Name),
        Just(Sel::Generation),
        (0..4u64).prop_map(Sel::ShardUid),
        Just(Sel::ShardUidOr),
        (0..2u64).prop_map(Sel::ShardNs),
        (0..4u64, 0..3usize).prop_map(|(q, n)| Sel::ShardAndNode(q, n)),
    ]
}

#[derive(Debug, Clone)]
enum Op {
    /// Create or update (all fields) one object.
    Put {
        ns: bool,
        name: usize,
        node: usize,
        app: usize,
        tier: bool,
    },
    Delete {
        ns: bool,
        name: usize,
    },
    Move {
        ns: bool,
        name: usize,
        node: usize,
    },
    Relabel {
        ns: bool,
        name: usize,
        app: usize,
        tier: bool,
    },
    /// Two changes at one revision.
    Txn(Box<Op>, Box<Op>),
    /// A revision for another resource (progress).
    Bump,
}

fn single_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<bool>(), 0..6usize, 0..3usize, 0..3usize, any::<bool>())
            .prop_map(|(ns, name, node, app, tier)| Op::Put { ns, name, node, app, tier }),
        2 => (any::<bool>(), 0..6usize).prop_map(|(ns, name)| Op::Delete { ns, name }),
        2 => (any::<bool>(), 0..6usize, 0..3usize).prop_map(|(ns, name, node)| Op::Move { ns, name, node }),
        2 => (any::<bool>(), 0..6usize, 0..3usize, any::<bool>())
            .prop_map(|(ns, name, app, tier)| Op::Relabel { ns, name, app, tier }),
        1 => Just(Op::Bump),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![8 => single_op(), 1 => (single_op(), single_op()).prop_map(|(a, b)| Op::Txn(Box::new(a), Box::new(b)))]
}

#[derive(Debug, Clone, Copy)]
enum Start {
    /// resourceVersion = the revision after step k (clamped to the steps so far).
    At(usize),
    /// resourceVersion "0" (legacy initial events).
    Zero,
    /// resourceVersion unset, sendInitialEvents=true (WatchList).
    WatchList,
    /// resourceVersion N, sendInitialEvents=true.
    WatchListAt(usize),
}

#[derive(Debug, Clone)]
struct WatchSpec {
    sel: Sel,
    start: Start,
    /// Created before this step.
    created_at: usize,
    /// Events consumed after each step (0: only at the end).
    per_step: usize,
}

fn watch_strategy(steps: usize) -> impl Strategy<Value = WatchSpec> {
    let start = prop_oneof![
        3 => (0..=steps).prop_map(Start::At),
        1 => Just(Start::Zero),
        1 => Just(Start::WatchList),
        1 => (0..=steps).prop_map(Start::WatchListAt),
    ];
    (
        sel_strategy(),
        start,
        0..=steps,
        prop_oneof![Just(0usize), 1..3usize, Just(50usize)],
    )
        .prop_map(|(sel, start, created_at, per_step)| WatchSpec {
            sel,
            start,
            created_at,
            per_step,
        })
}

#[derive(Debug, Clone)]
struct ListSpec {
    sel: Sel,
    /// Listed after this step.
    at_step: usize,
    limit: Option<usize>,
    /// Pages after the first are fetched this many steps later.
    continue_after: usize,
    /// Read at the revision of this earlier step with Exact.
    exact_step: Option<usize>,
}

fn list_strategy(steps: usize) -> impl Strategy<Value = ListSpec> {
    (
        sel_strategy(),
        0..=steps,
        prop::option::of(1..4usize),
        0..4usize,
        prop::option::of(0..=steps),
    )
        .prop_map(
            |(sel, at_step, limit, continue_after, exact_step)| ListSpec {
                sel,
                at_step,
                limit,
                continue_after,
                exact_step,
            },
        )
}

#[derive(Debug, Clone)]
struct Case {
    ops: Vec<Op>,
    watches: Vec<WatchSpec>,
    lists: Vec<ListSpec>,
    /// None: a history large enough to hold everything; Some(h): exactly h events.
    history: Option<usize>,
    routed_buffer: usize,
    unrouted_buffer: usize,
}

fn case_strategy() -> impl Strategy<Value = Case> {
    (1..50usize).prop_flat_map(|steps| {
        (
            prop::collection::vec(op_strategy(), steps),
            prop::collection::vec(watch_strategy(steps), 1..6),
            prop::collection::vec(list_strategy(steps), 0..4),
            prop_oneof![3 => Just(None), 1 => (4..24usize).prop_map(Some)],
            1..4usize,
            1..6usize,
        )
            .prop_map(
                |(ops, watches, lists, history, routed_buffer, unrouted_buffer)| Case {
                    ops,
                    watches,
                    lists,
                    history,
                    routed_buffer,
                    unrouted_buffer,
                },
            )
    })
}

/// One change as the model records it.
#[derive(Debug, Clone)]
struct ModelEvent {
    rv: u64,
    old: Option<Pod>,
    new: Option<Pod>,
}

/// What a watcher should see, in model terms: (type, ns, name, node, app, event rv) or a bookmark.
type Seen = (
    EventType,
    String,
    u64,
    Option<(String, String, Option<String>, bool)>,
);

struct Model {
    state: BTreeMap<String, (Pod, u64)>,
    events: Vec<ModelEvent>,
    rv: u64,
    /// rv after each completed step (index 0: before any step).
    step_rv: Vec<u64>,
    generation: u32,
}

impl Model {
    fn pod_at(&self, ns: bool, name: usize) -> (String, Option<Pod>) {
        let ns = if ns { "a" } else { "b" };
        let key = format!("/registry/pods/{ns}/{}", NAMES[name]);
        let cur = self.state.get(&key).map(|(p, _)| p.clone());
        (key, cur)
    }

    /// The writes of one op: (key, new state or None for delete). Ops on missing objects do nothing.
    fn writes(&mut self, op: &Op) -> Vec<(String, Option<Pod>)> {
        self.generation += 1;
        let generation = self.generation;
        let nsname = |ns: bool| if ns { "a" } else { "b" };
        match op {
            Op::Put {
                ns,
                name,
                node,
                app,
                tier,
            } => {
                let p = Pod {
                    ns: nsname(*ns),
                    name: NAMES[*name],
                    node: NODES[*node],
                    app: APPS[*app],
                    tier: *tier,
                    generation,
                    uid: generation,
                };
                vec![(p.key(), Some(p))]
            }
            Op::Delete { ns, name } => {
                let (k, cur) = self.pod_at(*ns, *name);
                cur.map(|_| (k, None)).into_iter().collect()
            }
            Op::Move { ns, name, node } => {
                let (k, cur) = self.pod_at(*ns, *name);
                cur.map(|p| {
                    (
                        k,
                        Some(Pod {
                            node: NODES[*node],
                            generation,
                            ..p
                        }),
                    )
                })
                .into_iter()
                .collect()
            }
            Op::Relabel {
                ns,
                name,
                app,
                tier,
            } => {
                let (k, cur) = self.pod_at(*ns, *name);
                cur.map(|p| {
                    (
                        k,
                        Some(Pod {
                            app: APPS[*app],
                            tier: *tier,
                            generation,
                            ..p
                        }),
                    )
                })
                .into_iter()
                .collect()
            }
            Op::Txn(a, b) => {
                let mut w = self.writes(a);
                // The second change sees the first's result, as in one etcd transaction on one key.
                let saved = self.state.clone();
                for (k, p) in &w {
                    match p {
                        Some(p) => self.state.insert(k.clone(), (p.clone(), 0)),
                        None => self.state.remove(k),
                    };
                }
                let wb = self.writes(b);
                self.state = saved;
                // One key written twice in one transaction: etcd keeps the last write only.
                w.retain(|(k, _)| !wb.iter().any(|(kb, _)| kb == k));
                w.extend(wb);
                w
            }
            Op::Bump => Vec::new(),
        }
    }

    fn apply(&mut self, rv: u64, writes: &[(String, Option<Pod>)]) {
        for (k, p) in writes {
            let old = self.state.get(k).map(|(p, _)| p.clone());
            if old.is_none() && p.is_none() {
                continue;
            }
            match p {
                Some(p) => self.state.insert(k.clone(), (p.clone(), rv)),
                None => self.state.remove(k),
            };
            self.events.push(ModelEvent {
                rv,
                old,
                new: p.clone(),
            });
        }
        self.rv = rv;
    }

    fn floor(&self, history: Option<usize>, upto_events: usize) -> u64 {
        match history {
            Some(h) if upto_events > h => self.events[upto_events - h - 1].rv,
            _ => 1,
        }
    }

    fn expected_changes(&self, sel: Sel, after_rv: u64) -> Vec<Seen> {
        let mut out = Vec::new();
        for e in self.events.iter().filter(|e| e.rv > after_rv) {
            let cur = e.new.as_ref().is_some_and(|p| sel.matches(p));
            let old = e.old.as_ref().is_some_and(|p| sel.matches(p));
            let (kind, p) = match (cur, old) {
                (true, false) => (EventType::Added, e.new.as_ref()),
                (true, true) => (EventType::Modified, e.new.as_ref()),
                (false, true) => (EventType::Deleted, e.old.as_ref()),
                (false, false) => continue,
            };
            out.push(seen(kind, p.unwrap(), e.rv));
        }
        out
    }

    fn state_at(&self, rv: u64) -> BTreeMap<String, (Pod, u64)> {
        let mut st = self.state.clone();
        for e in self.events.iter().rev().filter(|e| e.rv > rv) {
            let key = e.new.as_ref().or(e.old.as_ref()).unwrap().key();
            match &e.old {
                Some(p) => {
                    // The old state's revision: the last earlier event on that key.
                    let orv = self
                        .events
                        .iter()
                        .rev()
                        .find(|x| x.rv < e.rv && x.new.as_ref().is_some_and(|n| n.key() == key))
                        .map_or(1, |x| x.rv);
                    st.insert(key, (p.clone(), orv))
                }
                None => st.remove(&key),
            };
        }
        st
    }
}

fn seen(kind: EventType, p: &Pod, rv: u64) -> Seen {
    (
        kind,
        format!("{}/{}", p.ns, p.name),
        rv,
        Some((
            p.node.to_owned(),
            p.generation.to_string(),
            p.app.map(str::to_owned),
            p.tier,
        )),
    )
}

fn observed(e: &watchcache::WatchEvent) -> Seen {
    match e.object() {
        None => (e.kind(), String::new(), e.resource_version(), None),
        Some(o) => {
            let f = |p: &str| o.field(&FieldPath::parse(p).unwrap()).unwrap().into_owned();
            // The event's own JSON must carry the event revision (DELETED: the deletion's).
            let v: serde_json::Value = serde_json::from_slice(e.json()).unwrap();
            let rv_in_json: u64 = v["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(
                rv_in_json,
                e.resource_version(),
                "resourceVersion in the event JSON"
            );
            (
                e.kind(),
                format!("{}/{}", o.namespace().unwrap(), o.name()),
                e.resource_version(),
                Some((
                    f("spec.nodeName"),
                    f("spec.gen"),
                    o.label("app").map(str::to_owned),
                    o.label("tier").is_some(),
                )),
            )
        }
    }
}

struct LiveWatch {
    spec: WatchSpec,
    stream: Option<WatchStream>,
    got: Vec<Seen>,
    /// Initial events expected (known at creation), and the revision live events start after.
    expected: (Vec<Seen>, u64),
    /// Set when the stream ended with Expired: (oldest reported, model floor when it happened).
    expired: Option<(u64, u64)>,
    /// When the watch call itself was refused as too old.
    refused: bool,
}

fn drain(w: &mut LiveWatch, max: usize, model: &Model, history: Option<usize>) {
    let Some(stream) = w.stream.as_mut() else {
        return;
    };
    for _ in 0..max {
        match stream.next().now_or_never() {
            Some(Some(Ok(e))) => w.got.push(observed(&e)),
            Some(Some(Err(Error::Expired { oldest, .. }))) => {
                w.expired = Some((oldest, model.floor(history, model.events.len())));
                w.stream = None;
                return;
            }
            Some(Some(Err(e))) => panic!("unexpected error {e}"),
            Some(None) => panic!("stream ended without an error"),
            None => return,
        }
    }
}

fn run(case: Case) -> Result<(), TestCaseError> {
    let mut def = ResourceDef::builtin("pods").unwrap();
    // Selectors here name an undeclared field (`spec.gen`, evaluated from each object), which
    // kube-apiserver's pods refuse: a definition without field_selectors accepts any path.
    def.field_labels = None;
    if let Some(h) = case.history {
        def.history = HistoryConfig {
            min_events: h,
            max_events: h,
            window: Duration::from_secs(75),
            max_bytes: None,
        };
    }
    let config = CacheConfig::default()
        .routed_buffer(case.routed_buffer)
        .unrouted_buffer(case.unrouted_buffer, case.unrouted_buffer);
    let (cache, writer) = Cache::new(def, config);
    let src = MemorySource::new(writer, 1, []);
    let mut model = Model {
        state: BTreeMap::new(),
        events: Vec::new(),
        rv: 1,
        step_rv: vec![1],
        generation: 0,
    };
    let mut watches: Vec<LiveWatch> = Vec::new();
    let mut pending_pages: Vec<(usize, ListSpec, String, u64, Vec<String>)> = Vec::new();
    let steps = case.ops.len();

    for step in 0..=steps {
        // Watches created before this step.
        for spec in case.watches.iter().filter(|w| w.created_at == step) {
            let rv_of = |k: usize| model.step_rv[k.min(step)];
            let (opts, expected) = match spec.start {
                Start::At(k) => {
                    let rv = rv_of(k);
                    (
                        WatchOptions::new(spec.sel.selection(), ResourceVersion::At(rv)),
                        (Vec::new(), rv),
                    )
                }
                Start::Zero | Start::WatchList | Start::WatchListAt(_) => {
                    let (rv, opts) = match spec.start {
                        Start::Zero => (
                            ResourceVersion::Any,
                            WatchOptions::new(spec.sel.selection(), ResourceVersion::Any),
                        ),
                        Start::WatchList => (
                            ResourceVersion::Unset,
                            WatchOptions::new(spec.sel.selection(), ResourceVersion::Unset)
                                .send_initial_events(true),
                        ),
                        _ => {
                            let Start::WatchListAt(k) = spec.start else {
                                unreachable!()
                            };
                            let rv = ResourceVersion::At(rv_of(k));
                            (
                                rv,
                                WatchOptions::new(spec.sel.selection(), rv)
                                    .send_initial_events(true),
                            )
                        }
                    };
                    let _ = rv;
                    let mut exp: Vec<Seen> = model
                        .state
                        .values()
                        .filter(|(p, _)| spec.sel.matches(p))
                        .map(|(p, prv)| seen(EventType::Added, p, *prv))
                        .collect();
                    if !matches!(spec.start, Start::Zero) {
                        exp.push((EventType::Bookmark, String::new(), model.rv, None));
                    }
                    (opts, (exp, model.rv))
                }
            };
            let floor = model.floor(case.history, model.events.len());
            match cache
                .watch(opts)
                .now_or_never()
                .expect("watch does not wait here")
            {
                Ok(stream) => watches.push(LiveWatch {
                    spec: spec.clone(),
                    stream: Some(stream),
                    got: Vec::new(),
                    expected,
                    expired: None,
                    refused: false,
                }),
                Err(Error::Expired { requested, oldest }) => {
                    prop_assert!(
                        case.history.is_some(),
                        "Expired with a history that holds everything"
                    );
                    prop_assert_eq!(oldest, floor);
                    prop_assert!(
                        requested < floor,
                        "refused {} with floor {}",
                        requested,
                        floor
                    );
                    watches.push(LiveWatch {
                        spec: spec.clone(),
                        stream: None,
                        got: Vec::new(),
                        expected: (Vec::new(), 0),
                        expired: None,
                        refused: true,
                    });
                }
                Err(e) => return Err(TestCaseError::fail(format!("watch failed: {e}"))),
            }
        }
        // Lists after the previous step.
        for spec in case.lists.iter().filter(|l| l.at_step == step) {
            check_list(&cache, &model, spec, case.history, &mut pending_pages, step)?;
        }
        for (due, spec, token, rv, mut acc) in std::mem::take(&mut pending_pages) {
            if due > step {
                pending_pages.push((due, spec, token, rv, acc));
                continue;
            }
            let opts = ListOptions::all()
                .select(spec.sel.selection())
                .limit(spec.limit.unwrap())
                .continue_from(token);
            match cache.list(&opts).now_or_never().unwrap() {
                Ok(page) => {
                    prop_assert_eq!(page.resource_version, rv);
                    acc.extend(page.items.iter().map(|o| o.key().to_owned()));
                    match page.continue_token {
                        Some(t) => {
                            pending_pages.push((step + spec.continue_after, spec, t, rv, acc))
                        }
                        None => {
                            let want: Vec<String> = model
                                .state_at(rv)
                                .iter()
                                .filter(|(_, (p, _))| spec.sel.matches(p))
                                .map(|(k, _)| k.clone())
                                .collect();
                            prop_assert_eq!(acc, want, "paged list at {}", rv);
                        }
                    }
                }
                Err(Error::ContinueExpired {
                    requested, oldest, ..
                }) => {
                    prop_assert!(case.history.is_some());
                    prop_assert!(requested < oldest);
                }
                Err(e) => return Err(TestCaseError::fail(format!("continue failed: {e}"))),
            }
        }
        if step == steps {
            break;
        }
        // The op.
        let op = &case.ops[step];
        let writes = model.writes(op);
        let rv = if matches!(op, Op::Bump) {
            src.bump()
        } else if writes.is_empty() {
            // Nothing to write (e.g. deleting a missing object): still a step with the same revision.
            model.rv
        } else {
            src.txn(
                writes
                    .iter()
                    .map(|(k, p)| (k.clone(), p.as_ref().map(|p| p.json().into()))),
            )
            .unwrap()
        };
        model.apply(rv, &writes);
        model.step_rv.push(rv);
        for w in &mut watches {
            if w.spec.per_step > 0 {
                drain(w, w.spec.per_step, &model, case.history);
            }
        }
    }
    for w in &mut watches {
        drain(w, usize::MAX, &model, case.history);
        if w.refused {
            continue;
        }
        let (mut expected, after) = w.expected.clone();
        expected.extend(model.expected_changes(w.spec.sel, after));
        match w.expired {
            None => prop_assert_eq!(&w.got, &expected, "watch {:?}", w.spec),
            Some((oldest, floor)) => {
                prop_assert!(
                    case.history.is_some(),
                    "Expired with a history that holds everything"
                );
                prop_assert_eq!(oldest, floor);
                prop_assert!(w.got.len() <= expected.len());
                prop_assert_eq!(
                    &w.got[..],
                    &expected[..w.got.len()],
                    "prefix before Expired, {:?}",
                    w.spec
                );
            }
        }
    }
    Ok(())
}

fn check_list(
    cache: &Cache,
    model: &Model,
    spec: &ListSpec,
    history: Option<usize>,
    pending: &mut Vec<(usize, ListSpec, String, u64, Vec<String>)>,
    step: usize,
) -> Result<(), TestCaseError> {
    let mut opts = ListOptions::all().select(spec.sel.selection());
    let mut at = model.rv;
    if let Some(k) = spec.exact_step {
        at = model.step_rv[k.min(step)];
        opts = opts.at(ResourceVersion::At(at), Some(RvMatch::Exact));
    }
    if let Some(l) = spec.limit {
        opts = opts.limit(l);
    }
    match cache
        .list(&opts)
        .now_or_never()
        .expect("list does not wait here")
    {
        Ok(page) => {
            prop_assert_eq!(page.resource_version, at);
            let want: Vec<(String, u64)> = model
                .state_at(at)
                .iter()
                .filter(|(_, (p, _))| spec.sel.matches(p))
                .map(|(k, (_, rv))| (k.clone(), *rv))
                .collect();
            let got: Vec<(String, u64)> = page
                .items
                .iter()
                .map(|o| (o.key().to_owned(), o.resource_version()))
                .collect();
            match spec.limit {
                None => prop_assert_eq!(got, want),
                Some(l) => {
                    prop_assert_eq!(&got[..], &want[..l.min(want.len())]);
                    prop_assert_eq!(page.continue_token.is_some(), want.len() > l);
                    if let Some(t) = page.continue_token {
                        pending.push((
                            step + spec.continue_after,
                            spec.clone(),
                            t,
                            at,
                            got.into_iter().map(|g| g.0).collect(),
                        ));
                    }
                }
            }
        }
        Err(Error::Expired { requested, oldest }) => {
            prop_assert!(history.is_some());
            prop_assert_eq!(oldest, model.floor(history, model.events.len()));
            prop_assert!(requested < oldest);
        }
        Err(e) => return Err(TestCaseError::fail(format!("list failed: {e}"))),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn streams_and_lists_equal_the_naive_model(case in case_strategy()) {
        run(case)?;
    }
}
