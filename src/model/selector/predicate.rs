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
    /// An undeclared field, read from the object, with what it reads when absent.
    Json(FieldPath, Option<Box<str>>),
}

/// The compiled filter of a LIST or WATCH.
#[derive(Debug, Clone)]
pub(crate) struct Predicate {
    namespace: Option<Box<str>>,
    fields: Vec<(FieldSource, FieldRequirement)>,
    labels: LabelSelector,
    /// The `shardSelector`, checked first: one hash of a pre-read field, no JSON. Boxed: rare,
    /// and 56 bytes inline in every watcher.
    shard: Option<Box<ShardSelector>>,
    /// Equality terms answerable by a store index: (index slot, attribute, accepted values).
    index_terms: Vec<(usize, Attr, Vec<String>)>,
    /// The trigger this watcher is routed by, if the selection pins one.
    route: Option<(Attr, String)>,
}

impl Predicate {
    pub fn compile(schema: &Schema, sel: &Selection) -> Predicate {
        let fields: Vec<_> = sel
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
                        FieldSource::Json(
                            r.path().clone(),
                            schema.default_of(r.path().as_str()).map(Into::into),
                        ),
                        r.clone(),
                    ),
                }
            })
            .collect();

        // Every way the selection pins an attribute to a finite set of values.
        let mut pinned: Vec<(Attr, Vec<String>)> = Vec::new();
        if let Some(ns) = &sel.namespace {
            pinned.push((Attr::Namespace, vec![ns.clone()]));
        }
        for (src, r) in &fields {
            if let (FieldSource::Attr(a), true) = (src, r.is_equality()) {
                pinned.push((*a, vec![r.value().to_owned()]));
            }
        }
        for r in sel.labels.requirements() {
            if let (Some(a), Some(values)) = (schema.label_attr(r.key()), r.pinned_values()) {
                pinned.push((a, values.to_vec()));
            }
        }
        let index_terms = pinned
            .iter()
            .filter_map(|(a, v)| schema.index_slot(*a).map(|slot| (slot, *a, v.clone())))
            .collect();
        let route = schema.triggers.iter().find_map(|t| {
            pinned.iter().find_map(|(a, v)| match v.as_slice() {
                [one] if a == t => Some((*a, one.clone())),
                _ => None,
            })
        });
        Predicate {
            namespace: sel.namespace.as_deref().map(Into::into),
            fields,
            labels: sel.labels.clone(),
            shard: sel.shard.clone().map(Box::new),
            index_terms,
            route,
        }
    }

    /// Whether the object passes every term.
    pub fn matches(&self, schema: &Schema, obj: &Object) -> bool {
        self.evaluate(schema, obj, false)
    }

    /// [`matches`](Predicate::matches) for dispatch to a live watcher: an undeclared field read
    /// from the JSON stays in the object's memo, for every other watcher of the same path.
    pub fn matches_live(&self, schema: &Schema, obj: &Object) -> bool {
        self.evaluate(schema, obj, true)
    }

    fn evaluate(&self, schema: &Schema, obj: &Object, keep: bool) -> bool {
        if let Some(shard) = &self.shard
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
            FieldSource::Json(p, default) => obj.with_field(p, keep, |v| match (v, default) {
                (None | Some(""), Some(d)) => r.matches(d),
                (v, _) => v.is_some_and(|v| r.matches(v)),
            }),
        });
        fields_ok && self.labels.matches(|k| obj.label(k))
    }

    /// Equality terms that a store index can answer: (index slot, accepted values).
    pub fn index_terms(&self) -> impl Iterator<Item = (usize, &[String])> {
        self.index_terms.iter().map(|(slot, _, v)| (*slot, &v[..]))
    }

    /// The undeclared field paths this predicate reads from objects' JSON.
    pub fn json_paths(&self) -> impl Iterator<Item = &FieldPath> {
        self.fields.iter().filter_map(|(src, _)| match src {
            FieldSource::Json(p, _) => Some(p),
            FieldSource::Attr(_) => None,
        })
    }

    /// The one namespace every match is in, when the selection pins it (by path or by an
    /// equality on `metadata.namespace`).
    pub fn pinned_namespace(&self) -> Option<&str> {
        self.namespace
            .as_deref()
            .or_else(|| self.pinned(Attr::Namespace))
    }

    /// The one name every match has, when an equality on `metadata.name` pins it.
    pub fn pinned_name(&self) -> Option<&str> {
        self.pinned(Attr::Name)
    }

    fn pinned(&self, attr: Attr) -> Option<&str> {
        self.fields.iter().find_map(|(src, r)| match src {
            FieldSource::Attr(a) if *a == attr && r.is_equality() => Some(r.value()),
            _ => None,
        })
    }

    /// The shard selector, which routes a watcher no trigger routes (see `cache/shard_router.rs`).
    pub fn shard(&self) -> Option<&ShardSelector> {
        self.shard.as_deref()
    }

    /// The (trigger, value) a watcher with this predicate is routed by, if any.
    pub fn route(&self) -> Option<&(Attr, String)> {
        self.route.as_ref()
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
    fn a_predicate_is_small() {
        // Inline in every watcher (design/performance.md, "The watch body without a future").
        assert!(std::mem::size_of::<Predicate>() <= 128);
    }

    #[test]
    fn routes_by_the_most_selective_trigger() {
        let s = Schema::new(ResourceDef::builtin("pods").unwrap());
        let sel = Selection::parse(Some("ns"), "spec.nodeName=n7", "app=web").unwrap();
        let p = Predicate::compile(&s, &sel);
        assert_eq!(p.route(), Some(&(Attr::Field(0), "n7".to_owned())));
        assert_eq!(p.index_terms().count(), 3);
        let by_ns = Predicate::compile(&s, &Selection::parse(Some("ns"), "", "").unwrap());
        assert_eq!(by_ns.route(), Some(&(Attr::Namespace, "ns".to_owned())));
        let none = Predicate::compile(
            &s,
            &Selection::parse(None, "spec.nodeName!=x", "app in (a,b)").unwrap(),
        );
        assert_eq!(none.route(), None);
        assert_eq!(
            none.index_terms().count(),
            1,
            "label in-set is answerable by index"
        );
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
