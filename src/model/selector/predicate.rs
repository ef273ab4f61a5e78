//! A [`Selection`](super::Selection) compiled against one resource's schema: each field term is bound to
//! a pre-extracted attribute when there is one, so evaluation on the hot path reads no JSON.
// Reads outside input (requests or stored values): no panicking access (design/reliability.md).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::string_slice
    )
)]

use crate::model::FieldPath;
use crate::model::Object;
use crate::model::selector::{FieldRequirement, LabelSelector, Selection};
use crate::model::shard::ShardSelector;
use crate::model::{Attr, Schema};

#[derive(Debug, Clone)]
enum FieldSource {
    Attr(Attr),
    /// An undeclared field, read from the object. Boxed: rarer than a declared field, and 32 B
    /// in every term otherwise.
    Json(Box<JsonField>),
}

/// An undeclared field and what it reads when the object leaves it out or empty.
#[derive(Debug, Clone)]
struct JsonField {
    path: FieldPath,
    /// Another path read first then (an event's `source.component`: `reportingComponent`).
    fallback: Option<FieldPath>,
    /// Then this value (upstream's default).
    default: Option<Box<str>>,
}

/// The compiled filter of a LIST or WATCH.
#[derive(Debug, Clone)]
pub(crate) struct Predicate {
    namespace: Option<Box<str>>,
    /// Boxed slice: kept for the watcher's life, never grown.
    fields: Box<[(FieldSource, FieldRequirement)]>,
    /// The label selector and the shard selector, when there is either: one box, 8 bytes inline
    /// where the two took 32. Most watchers have neither (a kubelet's: one of ten has labels),
    /// and the 24 saved make the watcher a 112-byte block (`cache/watcher.rs`).
    rest: Option<Box<Rest>>,
    // The index terms and the route are read from the terms above when asked (`pinned_terms`), not
    // kept: a `spec.nodeName=X` watcher held X three times (its field term, its index term, its
    // route), 56 B inline and four allocations per watcher for what a LIST or a (un)register
    // reads once.
}

/// A predicate's rarer terms.
#[derive(Debug, Clone)]
struct Rest {
    labels: LabelSelector,
    /// The `shardSelector`, checked first: one hash of a pre-read field, no JSON.
    shard: Option<ShardSelector>,
}

/// The values a selection pins an attribute to, borrowed from its terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pinned<'a> {
    /// One value (a namespace, a field equality).
    One(&'a str),
    /// A label's accepted values (`=`, `==`, `in`).
    Set(&'a [String]),
}

impl<'a> Pinned<'a> {
    /// The accepted values.
    pub(crate) fn values(self) -> impl Iterator<Item = &'a str> {
        let (one, set) = match self {
            Pinned::One(v) => (Some(v), &[][..]),
            Pinned::Set(s) => (None, s),
        };
        one.into_iter().chain(set.iter().map(String::as_str))
    }

    /// The value, when exactly one is accepted.
    fn only(self) -> Option<&'a str> {
        match self {
            Pinned::One(v) => Some(v),
            Pinned::Set([v]) => Some(v),
            Pinned::Set(_) => None,
        }
    }
}

impl Predicate {
    pub(crate) fn compile(schema: &Schema, sel: &Selection) -> Predicate {
        let fields: Box<[_]> = sel
            .fields
            .requirements()
            .iter()
            .map(|r| {
                match schema.field_attr(r.path().as_str()) {
                    // The schema's path, shared: the request's copy is freed with its selection
                    // instead of living as long as the watcher.
                    Some(a @ Attr::Field(i)) => match schema.fields.get(usize::from(i)) {
                        Some(p) => (FieldSource::Attr(a), r.with_path(p.clone())),
                        None => (FieldSource::Attr(a), r.clone()),
                    },
                    Some(a) => (FieldSource::Attr(a), r.clone()),
                    None => (
                        FieldSource::Json(Box::new(JsonField {
                            path: r.path().clone(),
                            fallback: schema
                                .fallback_of(r.path().as_str())
                                .and_then(|p| FieldPath::parse(p).ok()),
                            default: schema.default_of(r.path().as_str()).map(Into::into),
                        })),
                        r.clone(),
                    ),
                }
            })
            .collect();
        Predicate {
            namespace: sel.namespace.as_deref().map(Into::into),
            fields,
            rest: (!sel.labels.is_empty() || sel.shard.is_some()).then(|| {
                Box::new(Rest {
                    labels: sel.labels.clone(),
                    shard: sel.shard.clone(),
                })
            }),
        }
    }

    /// Every way the selection pins an attribute to a finite set of values: its namespace, its
    /// equalities on declared fields, then its labels' `=`, `==` and `in` on declared labels.
    fn pinned_terms<'a>(&'a self, schema: &'a Schema) -> impl Iterator<Item = (Attr, Pinned<'a>)> {
        let ns = self
            .namespace
            .as_deref()
            .map(|ns| (Attr::Namespace, Pinned::One(ns)));
        let fields = self.fields.iter().filter_map(|(src, r)| match src {
            FieldSource::Attr(a) if r.is_equality() => Some((*a, Pinned::One(r.value()))),
            _ => None,
        });
        let labels = self
            .labels()
            .iter()
            .filter_map(|r| Some((schema.label_attr(r.key())?, Pinned::Set(r.pinned_values()?))));
        ns.into_iter().chain(fields).chain(labels)
    }

    /// Whether the object passes every term.
    pub(crate) fn matches(&self, schema: &Schema, obj: &Object) -> bool {
        self.evaluate(schema, obj, false)
    }

    /// [`matches`](Predicate::matches) for dispatch to a live watcher: an undeclared field read
    /// from the JSON stays in the object's memo, for every other watcher of the same path.
    pub(crate) fn matches_live(&self, schema: &Schema, obj: &Object) -> bool {
        self.evaluate(schema, obj, true)
    }

    fn evaluate(&self, schema: &Schema, obj: &Object, keep: bool) -> bool {
        if let Some(shard) = self.shard()
            && !shard.contains(obj.shard_hash(shard.key()))
        {
            return false;
        }
        if let Some(ns) = &self.namespace
            && obj.namespace() != Some(&**ns)
        {
            return false;
        }
        let fields_ok = self.fields.iter().all(|(src, r)| match src {
            FieldSource::Attr(a) => r.matches(obj.attr_in(schema, *a).unwrap_or("")),
            FieldSource::Json(json) => obj.with_field(&json.path, keep, |v| match v {
                Some(v) if !v.is_empty() => r.matches(v),
                _ => match &json.fallback {
                    // Upstream's field set writes the fallback's value, "" when absent.
                    Some(fb) => obj.with_field(fb, keep, |w| match (w, &json.default) {
                        (None | Some(""), Some(d)) => r.matches(d),
                        (w, _) => r.matches(w.unwrap_or("")),
                    }),
                    None => match (v, &json.default) {
                        (None | Some(""), Some(d)) => r.matches(d),
                        (v, _) => v.is_some_and(|v| r.matches(v)),
                    },
                },
            }),
        });
        fields_ok
            && self
                .rest
                .as_ref()
                .is_none_or(|r| r.labels.matches(|k| obj.label(k)))
    }

    /// The label selector's requirements (none: every object's labels pass).
    fn labels(&self) -> &[crate::model::selector::LabelRequirement] {
        self.rest.as_ref().map_or(&[], |r| r.labels.requirements())
    }

    /// Equality terms that a store index can answer: (index slot, accepted values).
    pub(crate) fn index_terms<'a>(
        &'a self,
        schema: &'a Schema,
    ) -> impl Iterator<Item = (usize, Pinned<'a>)> {
        self.pinned_terms(schema)
            .filter_map(|(a, v)| schema.index_slot(a).map(|slot| (slot, v)))
    }

    /// The undeclared field paths this predicate reads from objects' JSON.
    pub(crate) fn json_paths(&self) -> impl Iterator<Item = &FieldPath> {
        self.fields
            .iter()
            .flat_map(|(src, _)| match src {
                FieldSource::Json(json) => [Some(&json.path), json.fallback.as_ref()],
                FieldSource::Attr(_) => [None, None],
            })
            .flatten()
    }

    /// The one namespace every match is in, when the selection pins it (by path or by an
    /// equality on `metadata.namespace`).
    pub(crate) fn pinned_namespace(&self) -> Option<&str> {
        self.namespace
            .as_deref()
            .or_else(|| self.pinned(Attr::Namespace))
    }

    /// The one name every match has, when an equality on `metadata.name` pins it.
    pub(crate) fn pinned_name(&self) -> Option<&str> {
        self.pinned(Attr::Name)
    }

    fn pinned(&self, attr: Attr) -> Option<&str> {
        self.fields.iter().find_map(|(src, r)| match src {
            FieldSource::Attr(a) if *a == attr && r.is_equality() => Some(r.value()),
            _ => None,
        })
    }

    /// The shard selector, which routes a watcher no trigger routes (see `cache/shard_router.rs`).
    pub(crate) fn shard(&self) -> Option<&ShardSelector> {
        self.rest.as_ref().and_then(|r| r.shard.as_ref())
    }

    /// The (trigger, value) a watcher with this predicate is routed by, if any: the first of the
    /// schema's triggers (the most selective first) that the selection pins to one value. The
    /// same for the watcher's life (its predicate and the schema do not change), so its
    /// registration and its removal find the same place.
    pub(crate) fn route<'a>(&'a self, schema: &'a Schema) -> Option<(Attr, &'a str)> {
        schema.triggers.iter().find_map(|t| {
            self.pinned_terms(schema)
                .find_map(|(a, v)| if a == *t { v.only() } else { None })
                .map(|v| (*t, v))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::definition::ResourceDef;

    fn pod(schema: &Schema, ns: &str, name: &str, node: &str, labels: &str) -> Object {
        let json = format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"{ns}","labels":{{{labels}}}}},"spec":{{"nodeName":"{node}","prio":7}}}}"#
        );
        Object::decode(
            schema,
            &format!("/registry/pods/{ns}/{name}"),
            json.as_bytes(),
            1,
        )
        .unwrap()
    }

    #[test]
    fn an_events_source_falls_back_to_its_reporting_component() {
        let def = ResourceDef::builtin("events").unwrap();
        let s = Schema::new(def.clone());
        let ev = |name: &str, rest: &str| {
            let json = format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}}{rest}}}"#);
            Object::decode(
                &s,
                &format!("/registry/events/ns/{name}"),
                json.as_bytes(),
                1,
            )
            .unwrap()
        };
        let events = [
            ev(
                "a",
                r#","source":{"component":"kubelet"},"reportingComponent":"other""#,
            ),
            // As an events.k8s.io client writes it: no source, a reporting controller.
            ev("b", r#","reportingComponent":"test-controller""#),
            ev(
                "c",
                r#","source":{},"reportingComponent":"test-controller""#,
            ),
            ev("d", ""),
        ];
        let labels = def.field_labels.as_ref().unwrap();
        let matching = |sel: &str| -> Vec<String> {
            let fields = labels
                .convert(&crate::model::FieldSelector::parse(sel).unwrap())
                .unwrap();
            let mut selection = Selection::parse(None, "", "").unwrap();
            selection.fields = fields;
            let p = Predicate::compile(&s, &selection);
            events
                .iter()
                .filter(|o| p.matches(&s, o))
                .map(|o| o.name().to_owned())
                .collect()
        };
        // kube-apiserver's ToSelectableFields: the component, else the reporting controller.
        assert_eq!(matching("source=test-controller"), ["b", "c"]);
        assert_eq!(matching("source=kubelet"), ["a"]);
        assert_eq!(matching("source=other"), Vec::<String>::new());
        assert_eq!(matching("source="), ["d"]);
        assert_eq!(matching("source!=kubelet"), ["b", "c", "d"]);
        assert_eq!(matching("reportingComponent=test-controller"), ["b", "c"]);
    }

    #[test]
    fn a_predicate_is_small() {
        // Inline in every watcher (design/performance.md, "The watch body without a future").
        assert!(std::mem::size_of::<Predicate>() <= 40);
    }

    #[test]
    fn routes_by_the_most_selective_trigger() {
        let s = Schema::new(ResourceDef::builtin("pods").unwrap());
        let sel = Selection::parse(Some("ns"), "spec.nodeName=n7", "app=web").unwrap();
        let p = Predicate::compile(&s, &sel);
        assert_eq!(p.route(&s), Some((Attr::Field(0), "n7")));
        let terms: Vec<_> = p
            .index_terms(&s)
            .map(|(_, v)| v.values().collect::<Vec<_>>())
            .collect();
        assert_eq!(terms, [["ns"], ["n7"], ["web"]]);
        let by_ns = Predicate::compile(&s, &Selection::parse(Some("ns"), "", "").unwrap());
        assert_eq!(by_ns.route(&s), Some((Attr::Namespace, "ns")));
        let none = Predicate::compile(
            &s,
            &Selection::parse(None, "spec.nodeName!=x", "app in (a,b)").unwrap(),
        );
        assert_eq!(none.route(&s), None);
        let terms: Vec<_> = none
            .index_terms(&s)
            .map(|(_, v)| v.values().collect::<Vec<_>>())
            .collect();
        assert_eq!(terms, [["a", "b"]], "label in-set is answerable by index");
    }

    #[test]
    fn evaluates_indexed_and_unindexed_fields() {
        let s = Schema::new(ResourceDef::builtin("pods").unwrap());
        let o = pod(&s, "ns", "a", "n1", r#""app":"web""#);
        let m = |f: &str, l: &str| {
            Predicate::compile(&s, &Selection::parse(None, f, l).unwrap()).matches(&s, &o)
        };
        assert!(m("spec.nodeName=n1", ""));
        assert!(!m("spec.nodeName=n2", ""));
        assert!(m(
            "spec.prio=7,metadata.name=a,metadata.namespace==ns",
            "app"
        ));
        assert!(m("spec.missing=", "!tier"));
        assert!(!m("spec.missing!=", ""));
        assert!(m("", "app in (web,db),tier notin (x)"));
        assert!(
            !Predicate::compile(&s, &Selection::parse(Some("other"), "", "").unwrap())
                .matches(&s, &o)
        );
    }
}
