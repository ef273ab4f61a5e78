//! Fixtures for the cache's unit tests: a pods schema with a store and a history that events are
//! applied to, the way the cache applies them.

use std::sync::Arc;
use std::time::Instant;

use crate::cache::history::{Event, History};
use crate::cache::store::Store;
use crate::model::selector::Predicate;
use crate::model::{HistoryConfig, Object, ResourceDef, Schema, Selection};

pub(crate) struct Fixture {
    pub schema: Schema,
    pub store: Store,
    pub history: History,
    pub rv: u64,
}

pub(crate) fn on_node(node: &str) -> Selection {
    Selection::all()
        .with_fields(&format!("spec.nodeName={node}"))
        .unwrap()
}

impl Fixture {
    pub(super) fn new() -> Fixture {
        Self::with_history(HistoryConfig::default())
    }

    pub(super) fn with_history(cfg: HistoryConfig) -> Fixture {
        let mut def = ResourceDef::builtin("pods").unwrap();
        def.history = cfg;
        let schema = Schema::new(def);
        Fixture {
            store: Store::new(&schema),
            history: History::new(cfg),
            schema,
            rv: 0,
        }
    }

    pub(super) fn predicate(&self, sel: &Selection) -> Predicate {
        Predicate::compile(&self.schema, sel)
    }

    pub(super) fn pod(&self, name: &str, node: &str, rv: u64) -> Object {
        let json = format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns","labels":{{"app":"web"}}}},"spec":{{"nodeName":"{node}"}}}}"#
        );
        Object::decode(
            &self.schema,
            &format!("/registry/pods/ns/{name}"),
            json.as_bytes(),
            rv,
        )
        .unwrap()
    }

    /// A pod whose annotation makes its JSON about `size` bytes.
    pub(super) fn pod_sized(&self, name: &str, size: usize, rv: u64) -> Object {
        let json = format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns","annotations":{{"pad":"{}"}}}}}}"#,
            "x".repeat(size)
        );
        Object::decode(
            &self.schema,
            &format!("/registry/pods/ns/{name}"),
            json.as_bytes(),
            rv,
        )
        .unwrap()
    }

    /// Creates or updates pod `name` on `node` at the next revision.
    pub(super) fn put(&mut self, name: &str, node: &str) -> Arc<Event> {
        self.rv += 1;
        let obj = self.pod(name, node, self.rv);
        let prev = self.store.upsert(&self.schema, obj.clone());
        let rv = self.rv;
        Arc::clone(
            self.history
                .push(|seq| Event::new(seq, rv, Some(obj), prev, Instant::now())),
        )
    }

    /// Deletes pod `name` at the next revision.
    pub(super) fn delete(&mut self, name: &str) -> Arc<Event> {
        self.rv += 1;
        let prev = self
            .store
            .remove(&self.schema, &format!("/registry/pods/ns/{name}"));
        let rv = self.rv;
        Arc::clone(
            self.history
                .push(|seq| Event::new(seq, rv, None, prev, Instant::now())),
        )
    }

    /// An event at `rv` for a pod on n1 that is neither stored nor in the history.
    pub(super) fn history_event(&self, rv: u64) -> Event {
        Event::new(0, rv, Some(self.pod("x", "n1", rv)), None, Instant::now())
    }
}

/// The kinds of the events a stream has ready now.
pub(crate) fn drain(w: &mut crate::cache::WatchStream) -> Vec<crate::model::EventType> {
    use futures_util::{FutureExt, StreamExt};
    let mut out = Vec::new();
    while let Some(Some(Ok(ev))) = w.next().now_or_never() {
        out.push(ev.kind());
    }
    out
}
