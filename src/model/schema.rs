//! A resource definition compiled for the hot path: which attributes each object carries pre-extracted,
//! which of them are indexed, and which route watchers.

use crate::model::FieldPath;
use crate::model::definition::{IndexKey, ResourceDef};

/// One pre-extracted attribute of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Attr {
    /// `metadata.namespace` (absent for cluster-scoped objects).
    Namespace,
    /// `metadata.name`.
    Name,
    /// The declared field at this slot of [`Schema::fields`].
    Field(u16),
    /// The declared label at this slot of [`Schema::labels`] (absent when the object lacks the label).
    Label(u16),
}

/// The compiled form of a [`ResourceDef`].
#[derive(Debug)]
pub(crate) struct Schema {
    pub def: ResourceDef,
    /// Declared field indexes, in slot order; every object carries their values.
    pub fields: Vec<FieldPath>,
    /// What each declared field reads when the object leaves it out (upstream's field set gives
    /// some fields Go's zero value: a node's `spec.unschedulable` is `false`); empty otherwise.
    pub field_defaults: Vec<Box<str>>,
    /// The path each declared field reads when the object leaves it out or empty
    /// (`FieldLabels::fallbacks`), before its default.
    pub field_fallbacks: Vec<Option<FieldPath>>,
    /// Declared label indexes, in slot order.
    pub labels: Vec<String>,
    /// Attributes with a store index (bitmap per value), in store index order.
    pub indexed: Vec<Attr>,
    /// Attributes that route watchers, in order of preference (most selective first).
    pub triggers: Vec<Attr>,
    /// Whether `shardSelector` ranges route watchers (`ResourceDef::route_shards`).
    pub route_shards: bool,
    /// Whether kube-apiserver stores this kind as another type or as JSON read through its Go
    /// type (`model/protobuf/stored.rs`, `model/crd_storage.rs`): only then does ingest look at
    /// a JSON value's apiVersion and kind.
    pub stored_otherwise: bool,
}

impl Schema {
    pub(crate) fn new(def: ResourceDef) -> Schema {
        let mut fields = Vec::new();
        let mut labels = Vec::new();
        let mut indexed = Vec::new();
        let mut field_triggers = Vec::new();
        let mut label_triggers = Vec::new();
        if def.namespaced {
            indexed.push(Attr::Namespace);
        }
        for ix in &def.indexes {
            let attr = match &ix.key {
                IndexKey::Field(p) => {
                    fields.push(p.clone());
                    Attr::Field((fields.len() - 1) as u16)
                }
                IndexKey::Label(k) => {
                    labels.push(k.clone());
                    Attr::Label((labels.len() - 1) as u16)
                }
            };
            indexed.push(attr);
            if ix.trigger {
                match attr {
                    Attr::Label(_) => label_triggers.push(attr),
                    _ => field_triggers.push(attr),
                }
            }
        }
        // A name pins one object; declared fields usually partition more finely than labels; the
        // namespace is the coarsest.
        let mut triggers = vec![Attr::Name];
        triggers.extend(field_triggers);
        triggers.extend(label_triggers);
        if def.namespaced {
            triggers.push(Attr::Namespace);
        }
        let field_defaults = fields
            .iter()
            .map(|p| {
                def.field_labels
                    .as_ref()
                    .and_then(|l| l.default_of(p.as_str()))
                    .unwrap_or_default()
                    .into()
            })
            .collect();
        let field_fallbacks = fields
            .iter()
            .map(|p| {
                def.field_labels
                    .as_ref()
                    .and_then(|l| l.fallback_of(p.as_str()))
                    .and_then(|fb| FieldPath::parse(fb).ok())
            })
            .collect();
        let served = (def.api_version(), def.kind.clone());
        let stored_otherwise = def.rewrite_api_version
            || crate::model::protobuf::stored::stored_otherwise((
                served.0.as_str(),
                served.1.as_str(),
            ));
        Schema {
            stored_otherwise,
            route_shards: def.route_shards,
            def,
            fields,
            field_defaults,
            field_fallbacks,
            labels,
            indexed,
            triggers,
        }
    }

    /// The value an object carries for declared field `i`, read as `value`: upstream's default
    /// when the object leaves the field out (or empty). Borrowed, never copied.
    pub(crate) fn field_text<'v>(&'v self, i: usize, value: Option<&'v str>) -> &'v str {
        match value {
            Some(v) if !v.is_empty() => v,
            _ => self.field_defaults.get(i).map_or("", |d| &**d),
        }
    }

    /// What an undeclared field reads when the object leaves it out: upstream's default, if any.
    pub(crate) fn default_of(&self, path: &str) -> Option<&str> {
        self.def.field_labels.as_ref()?.default_of(path)
    }

    /// The path a field reads when the object leaves it out or empty, if any (before its
    /// default).
    pub(crate) fn fallback_of(&self, path: &str) -> Option<&str> {
        self.def.field_labels.as_ref()?.fallback_of(path)
    }

    /// The attribute that answers a field path, if the object carries it pre-extracted.
    pub(crate) fn field_attr(&self, path: &str) -> Option<Attr> {
        match path {
            "metadata.name" => Some(Attr::Name),
            "metadata.namespace" => Some(Attr::Namespace),
            _ => self
                .fields
                .iter()
                .position(|f| f.as_str() == path)
                .map(|i| Attr::Field(i as u16)),
        }
    }

    /// The attribute of a declared label index.
    pub(crate) fn label_attr(&self, key: &str) -> Option<Attr> {
        self.labels
            .iter()
            .position(|l| l == key)
            .map(|i| Attr::Label(i as u16))
    }

    /// The store index slot of an attribute, if it is indexed.
    pub(crate) fn index_slot(&self, attr: Attr) -> Option<usize> {
        self.indexed.iter().position(|a| *a == attr)
    }

    /// The store index slot for an index name (`spec.nodeName`, `label:app`, `metadata.namespace`).
    pub(crate) fn index_by_name(&self, name: &str) -> Option<(usize, Attr)> {
        let attr = match IndexKey::parse(name).ok()? {
            IndexKey::Field(p) => self.field_attr(p.as_str())?,
            IndexKey::Label(k) => self.label_attr(&k)?,
        };
        self.index_slot(attr).map(|slot| (slot, attr))
    }

    /// Names of every index, for error messages.
    pub(crate) fn index_names(&self) -> Vec<String> {
        self.indexed
            .iter()
            .map(|a| match a {
                Attr::Namespace => "metadata.namespace".to_owned(),
                Attr::Name => "metadata.name".to_owned(),
                Attr::Field(i) => self.fields[*i as usize].to_string(),
                Attr::Label(i) => format!("label:{}", self.labels[*i as usize]),
            })
            .collect()
    }
}
