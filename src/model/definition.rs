//! Resource definitions: the declarative files in `indexers/` that say where a resource lives in etcd,
//! what it is called on the wire, and which fields and labels are indexed and used as watch triggers.
//!
//! Built-in definitions are compiled in ([`ResourceDef::builtins`]); users can load a directory of their
//! own ([`ResourceDef::load_dir`]). Any resource, custom ones included, may declare several indexes and
//! several triggers. Upstream allows one trigger per resource, and has no label index.
//!
//! # Examples
//! ```
//! use watchcache::ResourceDef;
//!
//! let def = ResourceDef::parse("mine.toml", r#"
//!     kind = "Gadget"
//!     plural = "gadgets"
//!     group = "example.com"
//!     version = "v1"
//!     prefix = "/registry/example.com/gadgets/"
//!     namespaced = true
//!
//!     [[index]]
//!     field = "spec.owner"
//!     trigger = true
//! "#).unwrap();
//! assert_eq!(def.api_version(), "example.com/v1");
//! ```

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::model::FieldPath;
use crate::model::columns::{Computed, PrinterColumn, RawColumn};
pub use crate::model::field_labels::FieldLabels;
use crate::model::field_labels::RawFieldLabels;
use crate::model::labels::validate_key as validate_label_key;

/// Sizing of a resource's history window. Defaults follow upstream: start at 100 events and double
/// or halve between 100 and 102 400 so that at least 75 s of events are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryConfig {
    /// The smallest capacity, and the initial one.
    pub min_events: usize,
    /// The largest capacity.
    pub max_events: usize,
    /// Keep at least this much time of events, when the capacity allows.
    pub window: Duration,
    /// The most bytes the window's events may hold (`[history] max_bytes`, else
    /// `--history-bytes`); past it the oldest events leave the window. `None`: no budget.
    pub max_bytes: Option<usize>,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            min_events: 100,
            max_events: 100 * 1024,
            window: Duration::from_secs(75),
            max_bytes: None,
        }
    }
}

/// What an index is keyed by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IndexKey {
    /// A field's value, e.g. `spec.nodeName`.
    Field(FieldPath),
    /// A label's value, e.g. `app`.
    Label(String),
}

impl IndexKey {
    /// Parses an index name: a field path, or `label:KEY` for a label index.
    ///
    /// # Errors
    /// A message saying what is wrong.
    pub fn parse(name: &str) -> Result<Self, String> {
        match name.strip_prefix("label:") {
            Some(key) => validate_label_key(key).map(|()| IndexKey::Label(key.to_owned())),
            None => FieldPath::parse(name).map(IndexKey::Field),
        }
    }
}

impl std::fmt::Display for IndexKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IndexKey::Field(p) => write!(f, "{p}"),
            IndexKey::Label(k) => write!(f, "label:{k}"),
        }
    }
}

/// One declared index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexDef {
    /// What it is keyed by.
    pub key: IndexKey,
    /// Whether watchers pinning this index to a value are routed by it.
    pub trigger: bool,
}

/// A list that a strategic merge patch merges element by element instead of replacing
/// (upstream's `patchStrategy:"merge"` with its `patchMergeKey`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MergeList {
    /// The list's dotted path; list elements are transparent (`spec.containers.ports` is the ports
    /// of every container).
    pub path: String,
    /// The field elements are matched on (`name`); none for a list of primitives, merged as a set.
    #[serde(default)]
    pub key: Option<String>,
}

/// A resource definition, from one file of `indexers/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceDef {
    /// The API group; empty for the core group.
    pub group: String,
    /// The API version, e.g. `v1`.
    pub version: String,
    /// The kind, e.g. `Pod`.
    pub kind: String,
    /// The plural resource name used in URLs, e.g. `pods`.
    pub plural: String,
    /// The etcd key prefix, ending in `/`, e.g. `/registry/pods/`.
    pub prefix: String,
    /// Whether objects live in namespaces (keys are `prefix/ns/name`) or not (`prefix/name`).
    pub namespaced: bool,
    /// Declared indexes. The namespace index is implicit for namespaced resources.
    pub indexes: Vec<IndexDef>,
    /// History window sizing.
    pub history: HistoryConfig,
    /// How often this resource's cache is compared with its upstream (`consistency_check_seconds
    /// = N`, 0: never), overriding the cache config's period (`--consistency-check-period`).
    /// `None`: the config's.
    pub consistency_check_period: Option<Duration>,
    /// Whether watchers with a `shardSelector` (and no trigger) are routed by their hash ranges
    /// (always, from files); `false` only in [`without_triggers`](ResourceDef::without_triggers),
    /// the scan baseline, where each sharded watcher's filter checks every event as upstream's does.
    pub route_shards: bool,
    /// The singular name discovery advertises (`pod`); by default the kind in lowercase.
    pub singular: String,
    /// Short names kubectl accepts for the resource (`po`).
    pub short_names: Vec<String>,
    /// Categories the resource belongs to (`all`, so that `kubectl get all` lists it).
    pub categories: Vec<String>,
    /// Table columns after NAME, in order (priority 0 by default, 1 for `-o wide`). A definition that
    /// declares none gets AGE, as upstream gives a CRD without printer columns.
    pub columns: Vec<PrinterColumn>,
    /// Whether PATCH accepts `application/strategic-merge-patch+json` (built-ins; upstream refuses
    /// it for custom resources with 415).
    pub strategic_merge_patch: bool,
    /// Lists a strategic merge patch merges by key; `metadata.finalizers` and
    /// `metadata.ownerReferences` (by uid) are always included when strategic merge is on.
    pub merge_lists: Vec<MergeList>,
    /// Whether the resource has a `/status` subresource (`status_subresource` in the file). By
    /// default what kube-apiserver 1.35 serves for a built-in resource ([`upstream_has_status`]);
    /// a custom resource has one only when its CRD's `subresources.status` says so, so it must be
    /// declared. Without it `/status` paths are 404 and status is a field like any other.
    pub status_subresource: bool,
    /// The field selectors accepted, as kube-apiserver's field label conversion for the kind;
    /// `None` accepts any field path (a custom resource's definition may declare none).
    pub field_labels: Option<FieldLabels>,
    /// A custom resource whose CRD converts with `None` (a definition made by `CrdServing`): an
    /// object stored at another version of the group is read as this version, its apiVersion
    /// rewritten, as apiextensions' nop converter does. `false` in definition files.
    pub rewrite_api_version: bool,
    /// A custom resource's schemas (a definition made by `CrdServing`; `None` in definition
    /// files): each stored object is pruned and defaulted by them as kube-apiserver decodes it
    /// (`model/structural.rs`), so a CRD whose defaults or fields change gets a new cache.
    pub stored_schemas: Option<std::sync::Arc<crate::model::structural::StoredSchemas>>,
    /// The other versions this resource is served at from the same cache (a CRD's served
    /// versions besides its storage one, conversion `None`; empty in definition files): each
    /// this definition at that version, with that version's printer columns, field selectors
    /// and status subresource. An object read at one is this cache's object with its
    /// `apiVersion` changed, as apiextensions' nop converter converts it. Their own
    /// `other_versions` are empty.
    pub other_versions: Vec<ResourceDef>,
}

/// A definition file that could not be used: the file and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("resource definition {file}: {message}")]
pub struct DefinitionError {
    /// The file, as given.
    pub file: String,
    /// What is wrong.
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDef {
    kind: String,
    plural: String,
    #[serde(default)]
    group: String,
    version: String,
    prefix: String,
    namespaced: bool,
    #[serde(default)]
    history: Option<RawHistory>,
    #[serde(default)]
    consistency_check_seconds: Option<u64>,
    #[serde(default, rename = "index")]
    indexes: Vec<RawIndex>,
    #[serde(default)]
    singular: Option<String>,
    #[serde(default)]
    short_names: Vec<String>,
    #[serde(default)]
    categories: Vec<String>,
    #[serde(default, rename = "column")]
    columns: Vec<RawColumn>,
    #[serde(default)]
    strategic_merge_patch: bool,
    #[serde(default, rename = "merge_list")]
    merge_lists: Vec<MergeList>,
    #[serde(default)]
    status_subresource: Option<bool>,
    field_selectors: Option<RawFieldLabels>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHistory {
    min_events: Option<usize>,
    max_events: Option<usize>,
    window_seconds: Option<u64>,
    max_bytes: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIndex {
    field: Option<String>,
    label: Option<String>,
    #[serde(default)]
    trigger: bool,
}

/// The definitions compiled in: each file of `indexers/` (a unit test checks that none is left
/// out).
macro_rules! builtins {
    ($($file:literal),* $(,)?) => {
        &[$(($file, include_str!(concat!("../../indexers/", $file)))),*]
    };
}

const BUILTINS: &[(&str, &str)] = builtins![
    // core/v1
    "configmaps.toml",
    "endpoints.toml",
    "events.toml",
    "limitranges.toml",
    "namespaces.toml",
    "nodes.toml",
    "persistentvolumeclaims.toml",
    "persistentvolumes.toml",
    "pods.toml",
    "podtemplates.toml",
    "replicationcontrollers.toml",
    "resourcequotas.toml",
    "secrets.toml",
    "serviceaccounts.toml",
    "services.toml",
    // admissionregistration.k8s.io/v1
    "mutatingwebhookconfigurations.admissionregistration.k8s.io.toml",
    "validatingadmissionpolicies.admissionregistration.k8s.io.toml",
    "validatingadmissionpolicybindings.admissionregistration.k8s.io.toml",
    "validatingwebhookconfigurations.admissionregistration.k8s.io.toml",
    // apiextensions.k8s.io/v1, apiregistration.k8s.io/v1
    "customresourcedefinitions.apiextensions.k8s.io.toml",
    "apiservices.apiregistration.k8s.io.toml",
    // apps/v1
    "controllerrevisions.apps.toml",
    "daemonsets.apps.toml",
    "deployments.apps.toml",
    "replicasets.apps.toml",
    "statefulsets.apps.toml",
    // autoscaling/v2, batch/v1
    "horizontalpodautoscalers.autoscaling.toml",
    "cronjobs.batch.toml",
    "jobs.batch.toml",
    // certificates.k8s.io/v1, coordination.k8s.io/v1, discovery.k8s.io/v1, events.k8s.io/v1
    "certificatesigningrequests.certificates.k8s.io.toml",
    "leases.coordination.k8s.io.toml",
    "endpointslices.discovery.k8s.io.toml",
    "events.events.k8s.io.toml",
    // flowcontrol.apiserver.k8s.io/v1
    "flowschemas.flowcontrol.apiserver.k8s.io.toml",
    "prioritylevelconfigurations.flowcontrol.apiserver.k8s.io.toml",
    // networking.k8s.io/v1
    "ingressclasses.networking.k8s.io.toml",
    "ingresses.networking.k8s.io.toml",
    "ipaddresses.networking.k8s.io.toml",
    "networkpolicies.networking.k8s.io.toml",
    "servicecidrs.networking.k8s.io.toml",
    // node.k8s.io/v1, policy/v1
    "runtimeclasses.node.k8s.io.toml",
    "poddisruptionbudgets.policy.toml",
    // rbac.authorization.k8s.io/v1
    "clusterrolebindings.rbac.authorization.k8s.io.toml",
    "clusterroles.rbac.authorization.k8s.io.toml",
    "rolebindings.rbac.authorization.k8s.io.toml",
    "roles.rbac.authorization.k8s.io.toml",
    // resource.k8s.io/v1
    "deviceclasses.resource.k8s.io.toml",
    "resourceclaims.resource.k8s.io.toml",
    "resourceclaimtemplates.resource.k8s.io.toml",
    "resourceslices.resource.k8s.io.toml",
    // scheduling.k8s.io/v1
    "priorityclasses.scheduling.k8s.io.toml",
    // storage.k8s.io/v1
    "csidrivers.storage.k8s.io.toml",
    "csinodes.storage.k8s.io.toml",
    "csistoragecapacities.storage.k8s.io.toml",
    "storageclasses.storage.k8s.io.toml",
    "volumeattachments.storage.k8s.io.toml",
    "volumeattributesclasses.storage.k8s.io.toml",
    // The example custom resource.
    "widgets.example.com.toml",
];

/// Most indexes one resource may declare; each costs memory per object and work per event.
pub const MAX_INDEXES: usize = 32;

impl ResourceDef {
    /// Whether kube-apiserver converts this resource to a Table with its default convertor
    /// (`rest.NewDefaultTableConvertor`: no printer, columns Name and Created At), whose empty
    /// Table has `"rows":null`.
    pub fn has_default_table(&self) -> bool {
        matches!(&self.columns[..], [c] if c.name == "Created At" && c.type_ == "date")
    }

    /// The definitions compiled into the binary: every resource kube-apiserver 1.35 stores in
    /// etcd and serves by default (57, in their preferred stable version), and the example custom
    /// resource `widgets.example.com`.
    pub fn builtins() -> Vec<ResourceDef> {
        BUILTINS
            .iter()
            .map(|(file, text)| {
                Self::parse(file, text).unwrap_or_else(|e| unreachable!("built-in definition: {e}"))
            })
            .collect()
    }

    /// The built-in definition for a resource name: a plural (`pods`, `deployments`: the first
    /// built-in of that plural, the core group's first) or a plural qualified by its group
    /// (`events.events.k8s.io`), as [`ResourceDef::resource_name`] writes it.
    pub fn builtin(name: &str) -> Option<ResourceDef> {
        let defs = Self::builtins();
        let exact = defs.iter().position(|d| d.resource_name() == name);
        let i = exact.or_else(|| defs.iter().position(|d| d.plural == name))?;
        defs.into_iter().nth(i)
    }

    /// Loads every `*.toml` file of a directory, sorted by file name.
    ///
    /// # Errors
    /// A [`DefinitionError`] naming the first file that cannot be read or is invalid, or two files that
    /// define the same resource.
    pub fn load_dir(dir: &Path) -> Result<Vec<ResourceDef>, DefinitionError> {
        let err = |file: &Path, message: String| DefinitionError {
            file: file.display().to_string(),
            message,
        };
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .map_err(|e| err(dir, format!("cannot read directory: {e}")))?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        files.sort();
        let mut defs: Vec<ResourceDef> = Vec::with_capacity(files.len());
        for file in files {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| err(&file, format!("cannot read: {e}")))?;
            let def = Self::parse(&file.display().to_string(), &text)?;
            if let Some(other) = defs
                .iter()
                .find(|d| d.group == def.group && d.plural == def.plural)
            {
                return Err(err(
                    &file,
                    format!(
                        "defines {} again (already defined as kind {})",
                        def.plural, other.kind
                    ),
                ));
            }
            defs.push(def);
        }
        Ok(defs)
    }

    /// Parses and validates one definition. `file` names it in errors.
    ///
    /// # Errors
    /// A [`DefinitionError`] naming the file and what is wrong.
    pub fn parse(file: &str, text: &str) -> Result<ResourceDef, DefinitionError> {
        let err = |message: String| DefinitionError {
            file: file.to_owned(),
            message,
        };
        let raw: RawDef =
            toml::from_str(text).map_err(|e| err(e.to_string().trim_end().to_owned()))?;
        if raw.kind.is_empty()
            || !raw
                .kind
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_uppercase())
        {
            return Err(err(format!(
                "kind \"{}\" must start with an uppercase letter",
                raw.kind
            )));
        }
        if !is_dns_label(&raw.plural) {
            return Err(err(format!(
                "plural \"{}\" must be a lowercase DNS label",
                raw.plural
            )));
        }
        if !raw.group.is_empty() && !raw.group.split('.').all(is_dns_label) {
            return Err(err(format!(
                "group \"{}\" must be empty or a lowercase DNS subdomain",
                raw.group
            )));
        }
        if !is_dns_label(&raw.version) {
            return Err(err(format!(
                "version \"{}\" must be a lowercase DNS label such as v1",
                raw.version
            )));
        }
        if !raw.prefix.starts_with('/') || !raw.prefix.ends_with('/') || raw.prefix.len() < 3 {
            return Err(err(format!(
                "prefix \"{}\" must start and end with '/'",
                raw.prefix
            )));
        }
        let mut history = HistoryConfig::default();
        if let Some(h) = raw.history {
            history.min_events = h.min_events.unwrap_or(history.min_events);
            history.max_events = h
                .max_events
                .unwrap_or(history.max_events.max(history.min_events));
            if let Some(s) = h.window_seconds {
                history.window = Duration::from_secs(s);
            }
            if h.max_bytes == Some(0) {
                return Err(err("history: max_bytes must be positive".into()));
            }
            history.max_bytes = h.max_bytes;
            if history.min_events == 0 || history.min_events > history.max_events {
                return Err(err(format!(
                    "history: need 0 < min_events <= max_events, got {} and {}",
                    history.min_events, history.max_events
                )));
            }
        }
        if raw.indexes.len() > MAX_INDEXES {
            return Err(err(format!(
                "{} indexes declared; at most {MAX_INDEXES} are allowed",
                raw.indexes.len()
            )));
        }
        let mut indexes: Vec<IndexDef> = Vec::with_capacity(raw.indexes.len());
        for (i, ix) in raw.indexes.into_iter().enumerate() {
            let at = format!("index {}", i + 1);
            let key = match (ix.field, ix.label) {
                (Some(f), None) => {
                    let path = FieldPath::parse(&f).map_err(|m| err(format!("{at}: {m}")))?;
                    if matches!(path.as_str(), "metadata.namespace" | "metadata.name") {
                        return Err(err(format!(
                            "{at}: {path} is built in (namespace is always indexed, and both are always triggers)"
                        )));
                    }
                    IndexKey::Field(path)
                }
                (None, Some(l)) => {
                    validate_label_key(&l).map_err(|m| err(format!("{at}: {m}")))?;
                    IndexKey::Label(l)
                }
                (Some(_), Some(_)) => {
                    return Err(err(format!(
                        "{at}: set either `field` or `label`, not both"
                    )));
                }
                (None, None) => return Err(err(format!("{at}: set `field` or `label`"))),
            };
            if indexes.iter().any(|d| d.key == key) {
                return Err(err(format!("{at}: {key} is declared twice")));
            }
            indexes.push(IndexDef {
                key,
                trigger: ix.trigger,
            });
        }
        let singular = raw.singular.unwrap_or_else(|| raw.kind.to_lowercase());
        for name in std::iter::once(&singular)
            .chain(&raw.short_names)
            .chain(&raw.categories)
        {
            if !is_dns_label(name) {
                return Err(err(format!(
                    "\"{name}\": singular names, short names and categories must be lowercase DNS labels"
                )));
            }
        }
        let mut columns = Vec::with_capacity(raw.columns.len().max(1));
        for c in raw.columns {
            columns.push(c.compile().map_err(err)?);
        }
        if columns.is_empty() {
            columns.push(PrinterColumn {
                name: "Age".into(),
                type_: "date".into(),
                format: String::new(),
                description: CREATION_TIMESTAMP_DOC.into(),
                priority: 0,
                json_path: Vec::new(),
                computed: Some(Computed::Age),
                missing: None,
                hidden: false,
            });
        }
        let mut merge_lists = raw.merge_lists;
        if !raw.strategic_merge_patch && !merge_lists.is_empty() {
            return Err(err(
                "merge_list needs strategic_merge_patch = true (custom resources get merge patches only)".into(),
            ));
        }
        for l in &merge_lists {
            FieldPath::parse(&l.path).map_err(|m| err(format!("merge_list: {m}")))?;
        }
        if raw.strategic_merge_patch {
            for (path, key) in [
                ("metadata.finalizers", None),
                ("metadata.ownerReferences", Some("uid")),
            ] {
                if !merge_lists.iter().any(|l| l.path == path) {
                    merge_lists.push(MergeList {
                        path: path.into(),
                        key: key.map(str::to_owned),
                    });
                }
            }
        }
        let field_labels = raw
            .field_selectors
            .map(RawFieldLabels::compile)
            .transpose()
            .map_err(err)?;
        if let Some(labels) = &field_labels {
            // An index is there to answer selectors: one on a field no selector may name is a
            // mistake (upstream answers 400 for it).
            for ix in &indexes {
                if let IndexKey::Field(p) = &ix.key
                    && !labels.accepts(p.as_str())
                {
                    return Err(err(format!(
                        "index {p}: not among field_selectors, so no selector could use it"
                    )));
                }
            }
        }
        let status_subresource = raw
            .status_subresource
            .unwrap_or_else(|| upstream_has_status(&raw.group, &raw.plural));
        Ok(ResourceDef {
            status_subresource,
            field_labels,
            strategic_merge_patch: raw.strategic_merge_patch,
            merge_lists,
            singular,
            short_names: raw.short_names,
            categories: raw.categories,
            columns,
            group: raw.group,
            version: raw.version,
            kind: raw.kind,
            plural: raw.plural,
            prefix: raw.prefix,
            namespaced: raw.namespaced,
            indexes,
            history,
            consistency_check_period: raw.consistency_check_seconds.map(Duration::from_secs),
            route_shards: true,
            rewrite_api_version: false,
            stored_schemas: None,
            other_versions: Vec::new(),
        })
    }

    /// The resource's name as kubectl writes a group resource: `pods`, `deployments.apps`,
    /// `events.events.k8s.io`. Unique among served resources.
    pub fn resource_name(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// This definition at `version`: itself, or one of its [`other_versions`]; `None` when
    /// neither is served here.
    ///
    /// [`other_versions`]: ResourceDef::other_versions
    pub fn at_version(&self, version: &str) -> Option<&ResourceDef> {
        if self.version == version {
            return Some(self);
        }
        self.other_versions.iter().find(|d| d.version == version)
    }

    /// `group/version`, or just `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether this resource is a built-in kind that kube-apiserver serves and stores in
    /// protobuf (its message is in the generated tables); custom resources are JSON only.
    pub fn has_protobuf(&self) -> bool {
        crate::model::protobuf::has_message(&self.api_version(), &self.kind)
    }

    /// The etcd key of an object.
    pub fn key_for(&self, namespace: Option<&str>, name: &str) -> String {
        match (self.namespaced, namespace) {
            (true, Some(ns)) => format!("{}{ns}/{name}", self.prefix),
            _ => format!("{}{name}", self.prefix),
        }
    }

    /// The same definition with every trigger removed: the "scan" baseline, where each watcher's filter
    /// is evaluated for every event.
    #[must_use]
    pub fn without_triggers(mut self) -> Self {
        for ix in &mut self.indexes {
            ix.trigger = false;
        }
        self.route_shards = false;
        self
    }
}

/// `metav1.ObjectMeta`'s documentation of `creationTimestamp`: upstream's description of every
/// AGE and Created At column.
pub const CREATION_TIMESTAMP_DOC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// Whether kube-apiserver 1.35 serves a `/status` subresource for this built-in resource (group,
/// plural). Everything else (configmaps, secrets, events, leases, endpointslices, the RBAC kinds,
/// and any custom resource) has none: its `/status` path is not found.
pub fn upstream_has_status(group: &str, plural: &str) -> bool {
    const WITH_STATUS: &[(&str, &[&str])] = &[
        (
            "",
            &[
                "namespaces",
                "nodes",
                "persistentvolumeclaims",
                "persistentvolumes",
                "pods",
                "replicationcontrollers",
                "resourcequotas",
                "services",
            ],
        ),
        (
            "apps",
            &["daemonsets", "deployments", "replicasets", "statefulsets"],
        ),
        ("batch", &["cronjobs", "jobs"]),
        ("autoscaling", &["horizontalpodautoscalers"]),
        ("policy", &["poddisruptionbudgets"]),
        ("networking.k8s.io", &["ingresses", "servicecidrs"]),
        ("certificates.k8s.io", &["certificatesigningrequests"]),
        ("apiextensions.k8s.io", &["customresourcedefinitions"]),
        ("apiregistration.k8s.io", &["apiservices"]),
        ("storage.k8s.io", &["volumeattachments"]),
        (
            "flowcontrol.apiserver.k8s.io",
            &["flowschemas", "prioritylevelconfigurations"],
        ),
        (
            "admissionregistration.k8s.io",
            &["validatingadmissionpolicies"],
        ),
        ("resource.k8s.io", &["resourceclaims"]),
        ("internal.apiserver.k8s.io", &["storageversions"]),
    ];
    WITH_STATUS
        .iter()
        .any(|(g, plurals)| *g == group && plurals.contains(&plural))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every resource kube-apiserver 1.35 stores in etcd and serves by default (its aggregated
    /// discovery, less bindings, componentstatuses and the review kinds, which are not stored):
    /// `resource.group` and the preferred version.
    const UPSTREAM: &[(&str, &str)] = &[
        ("configmaps", "v1"),
        ("endpoints", "v1"),
        ("events", "v1"),
        ("limitranges", "v1"),
        ("namespaces", "v1"),
        ("nodes", "v1"),
        ("persistentvolumeclaims", "v1"),
        ("persistentvolumes", "v1"),
        ("pods", "v1"),
        ("podtemplates", "v1"),
        ("replicationcontrollers", "v1"),
        ("resourcequotas", "v1"),
        ("secrets", "v1"),
        ("serviceaccounts", "v1"),
        ("services", "v1"),
        ("apiservices.apiregistration.k8s.io", "v1"),
        ("controllerrevisions.apps", "v1"),
        ("daemonsets.apps", "v1"),
        ("deployments.apps", "v1"),
        ("replicasets.apps", "v1"),
        ("statefulsets.apps", "v1"),
        ("events.events.k8s.io", "v1"),
        ("horizontalpodautoscalers.autoscaling", "v2"),
        ("cronjobs.batch", "v1"),
        ("jobs.batch", "v1"),
        ("certificatesigningrequests.certificates.k8s.io", "v1"),
        ("ingressclasses.networking.k8s.io", "v1"),
        ("ingresses.networking.k8s.io", "v1"),
        ("ipaddresses.networking.k8s.io", "v1"),
        ("networkpolicies.networking.k8s.io", "v1"),
        ("servicecidrs.networking.k8s.io", "v1"),
        ("poddisruptionbudgets.policy", "v1"),
        ("clusterrolebindings.rbac.authorization.k8s.io", "v1"),
        ("clusterroles.rbac.authorization.k8s.io", "v1"),
        ("rolebindings.rbac.authorization.k8s.io", "v1"),
        ("roles.rbac.authorization.k8s.io", "v1"),
        ("csidrivers.storage.k8s.io", "v1"),
        ("csinodes.storage.k8s.io", "v1"),
        ("csistoragecapacities.storage.k8s.io", "v1"),
        ("storageclasses.storage.k8s.io", "v1"),
        ("volumeattachments.storage.k8s.io", "v1"),
        ("volumeattributesclasses.storage.k8s.io", "v1"),
        (
            "mutatingwebhookconfigurations.admissionregistration.k8s.io",
            "v1",
        ),
        (
            "validatingadmissionpolicies.admissionregistration.k8s.io",
            "v1",
        ),
        (
            "validatingadmissionpolicybindings.admissionregistration.k8s.io",
            "v1",
        ),
        (
            "validatingwebhookconfigurations.admissionregistration.k8s.io",
            "v1",
        ),
        ("customresourcedefinitions.apiextensions.k8s.io", "v1"),
        ("priorityclasses.scheduling.k8s.io", "v1"),
        ("leases.coordination.k8s.io", "v1"),
        ("runtimeclasses.node.k8s.io", "v1"),
        ("endpointslices.discovery.k8s.io", "v1"),
        ("deviceclasses.resource.k8s.io", "v1"),
        ("resourceclaims.resource.k8s.io", "v1"),
        ("resourceclaimtemplates.resource.k8s.io", "v1"),
        ("resourceslices.resource.k8s.io", "v1"),
        ("flowschemas.flowcontrol.apiserver.k8s.io", "v1"),
        (
            "prioritylevelconfigurations.flowcontrol.apiserver.k8s.io",
            "v1",
        ),
    ];

    #[test]
    fn a_definition_may_set_its_consistency_check_period() {
        let text = |extra: &str| {
            format!(
                "kind = \"Widget\"\nplural = \"widgets\"\ngroup = \"example.com\"\nversion = \"v1\"\nprefix = \"/registry/example.com/widgets/\"\nnamespaced = true\n{extra}"
            )
        };
        let d = ResourceDef::parse("w.toml", &text("")).unwrap();
        assert_eq!(d.consistency_check_period, None, "the config's period");
        let d = ResourceDef::parse("w.toml", &text("consistency_check_seconds = 60\n")).unwrap();
        assert_eq!(d.consistency_check_period, Some(Duration::from_secs(60)));
        let d = ResourceDef::parse("w.toml", &text("consistency_check_seconds = 0\n")).unwrap();
        assert_eq!(d.consistency_check_period, Some(Duration::ZERO), "off");
    }

    #[test]
    fn every_stored_resource_of_kube_apiserver_is_built_in_with_a_protobuf_message() {
        let defs = ResourceDef::builtins();
        for (name, version) in UPSTREAM {
            let d = defs
                .iter()
                .find(|d| d.resource_name() == *name)
                .unwrap_or_else(|| panic!("{name} is not built in"));
            assert_eq!(d.version, *version, "{name}");
            // Served in protobuf, as kube-apiserver serves every built-in kind.
            assert!(
                d.has_protobuf(),
                "{name}: no protobuf message for {}",
                d.kind
            );
            // Each states which field selectors upstream accepts and how kubectl shows it.
            assert!(d.field_labels.is_some(), "{name}: no field_selectors");
            assert!(d.strategic_merge_patch, "{name}: strategic merge patch off");
            assert!(
                !(d.columns.len() == 1
                    && d.columns[0].name == "Age"
                    && d.columns[0].type_ == "date"),
                "{name}: no printer columns declared"
            );
        }
        // The example custom resource is the only other one.
        assert_eq!(defs.len(), UPSTREAM.len() + 1);
        let widgets = ResourceDef::builtin("widgets").unwrap();
        assert_eq!(widgets.api_version(), "example.com/v1alpha1");
        assert!(!widgets.has_protobuf());
        // Names are unique; prefixes too, but for events, which both event APIs serve.
        let mut names: Vec<_> = defs.iter().map(ResourceDef::resource_name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), defs.len());
        let mut prefixes: Vec<_> = defs.iter().map(|d| d.prefix.as_str()).collect();
        prefixes.sort_unstable();
        let shared: Vec<_> = prefixes.windows(2).filter(|w| w[0] == w[1]).collect();
        assert_eq!(shared, [["/registry/events/", "/registry/events/"]]);
        // Plural lookups find the core group first; qualified names find their group.
        assert_eq!(ResourceDef::builtin("events").unwrap().group, "");
        assert_eq!(
            ResourceDef::builtin("events.events.k8s.io").unwrap().group,
            "events.k8s.io"
        );
        assert_eq!(ResourceDef::builtin("deployments").unwrap().group, "apps");
        let pods = ResourceDef::builtin("pods").unwrap();
        assert!(pods.indexes.iter().filter(|i| i.trigger).count() >= 2);
    }

    #[test]
    fn every_file_of_indexers_is_compiled_in() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("indexers");
        let on_disk = ResourceDef::load_dir(&dir).unwrap();
        let compiled = ResourceDef::builtins();
        assert_eq!(on_disk.len(), compiled.len());
        for d in &on_disk {
            assert!(
                compiled.contains(d),
                "{} is not compiled in",
                d.resource_name()
            );
        }
    }

    fn bad(text: &str) -> String {
        ResourceDef::parse("x.toml", text).unwrap_err().to_string()
    }

    const HEAD: &str = "kind=\"Pod\"\nplural=\"pods\"\nversion=\"v1\"\nprefix=\"/registry/pods/\"\nnamespaced=true\n";

    #[test]
    fn errors_name_the_file_and_the_problem() {
        assert!(bad("kind = ").starts_with("resource definition x.toml: "));
        assert!(bad(&HEAD.replace("\"Pod\"", "\"pod\"")).contains("uppercase"));
        assert!(bad(&HEAD.replace("/registry/pods/", "registry")).contains("prefix"));
        assert!(
            bad(&format!("{HEAD}[[index]]\nfield=\"a..b\"\n"))
                .contains("index 1: field path \"a..b\"")
        );
        assert!(bad(&format!("{HEAD}[[index]]\nlabel=\"-x\"\n")).contains("invalid label key"));
        assert!(bad(&format!("{HEAD}[[index]]\nfield=\"a\"\nlabel=\"b\"\n")).contains("not both"));
        assert!(
            bad(&format!("{HEAD}[[index]]\ntrigger=true\n")).contains("set `field` or `label`")
        );
        assert!(
            bad(&format!(
                "{HEAD}[[index]]\nfield=\"a\"\n[[index]]\nfield=\"a\"\n"
            ))
            .contains("declared twice")
        );
        assert!(
            bad(&format!("{HEAD}[[index]]\nfield=\"metadata.namespace\"\n")).contains("built in")
        );
        assert!(bad(&format!("{HEAD}color=\"red\"\n")).contains("unknown field"));
        assert!(bad(&format!("{HEAD}[history]\nmin_events=0\n")).contains("min_events"));
    }

    #[test]
    fn load_dir_reports_duplicates_and_bad_files() {
        let dir = std::env::temp_dir().join(format!("wc-defs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.toml"), HEAD).unwrap();
        assert_eq!(ResourceDef::load_dir(&dir).unwrap().len(), 1);
        std::fs::write(dir.join("b.toml"), HEAD).unwrap();
        let e = ResourceDef::load_dir(&dir).unwrap_err();
        assert!(
            e.file.ends_with("b.toml") && e.message.contains("again"),
            "{e}"
        );
        std::fs::write(dir.join("b.toml"), "nonsense").unwrap();
        assert!(
            ResourceDef::load_dir(&dir)
                .unwrap_err()
                .file
                .ends_with("b.toml")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
