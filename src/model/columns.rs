//! Printer columns: what `kubectl get` shows for a resource, declared per definition the way a CRD
//! declares `additionalPrinterColumns` (a name, a type, a JSONPath, a priority), plus computed
//! cells that upstream's built-in printers derive from several fields (a pod's READY, STATUS and
//! RESTARTS, a Deployment's READY, an event's LAST SEEN...: `model/printers.rs`), and the value
//! upstream's printer shows for an absent field (`missing`).
//!
//! Cells are computed from an object's JSON DOM; this is the Table path (kubectl's output), not the
//! watch hot path, and each cell follows upstream's printer (`pkg/printers/internalversion`).

pub use crate::model::printers::{human_duration, parse_timestamp};

use std::time::SystemTime;

use serde::Deserialize;
use serde_json::{Value, json};

/// A cell that no single JSONPath gives: computed as upstream's printer does
/// (`model/printers.rs`). Those marked *(path)* read the value at the column's `json_path`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Computed {
    /// Time since `metadata.creationTimestamp`, as kubectl prints durations (`5m`, `3d4h`).
    Age,
    /// *(path)* Time since the timestamp there; `<unknown>` (or `missing`) when absent.
    Since,
    /// *(path)* The number of entries of the map or list there.
    Size,
    /// *(path)* The strings of the list there joined with `,`; empty (or `missing`) for none.
    Join,
    /// *(path)* The names of the containers listed there, joined with `,`.
    Containers,
    /// *(path)* The images of the containers listed there, joined with `,`.
    Images,
    /// *(path)* A `LabelSelector` as `metav1.FormatLabelSelector` prints it (`app=web,tier in
    /// (a,b)`); `<none>` (or `missing`) for an empty or absent one.
    LabelSelector,
    /// *(path)* A string map as `labels.FormatLabels` prints it; `<none>` (or `missing`) for none.
    Labels,
    /// *(path)* A boolean as `printBoolPtr` prints it: `True`, `False`, `<unset>` (or `missing`).
    BoolText,
    /// *(path)* The scalar there as text (an int-or-string's `String()`); `<none>` (or `missing`).
    Text,
    /// *(path)* `kind/name` of the reference there.
    KindName,
    /// *(path)* Access modes as `RWO,ROX,RWX,RWOP`.
    AccessModes,
    /// Ready containers over containers, `1/2`.
    PodReady,
    /// The pod's status reason: `Running`, `Completed`, `CrashLoopBackOff`, `Init:0/1`,
    /// `Terminating`...
    PodStatus,
    /// Restarts summed over containers, with the last one's age: `3 (5m ago)`.
    PodRestarts,
    /// The pod's readiness gates whose condition is true, over its gates: `1/2`, or `<none>`.
    PodReadinessGates,
    /// `Ready`, `NotReady` or `Unknown` from the node's Ready condition, plus
    /// `,SchedulingDisabled` when cordoned.
    NodeStatus,
    /// The node's roles from its `node-role.kubernetes.io/*` labels.
    NodeRoles,
    /// The node's first InternalIP address.
    NodeInternalIp,
    /// The node's first ExternalIP address.
    NodeExternalIp,
    /// `status.readyReplicas/spec.replicas` (Deployments, StatefulSets).
    ReadyReplicas,
    /// A Job's status from its conditions.
    JobStatus,
    /// A Job's `succeeded/completions`.
    JobCompletions,
    /// A Job's run time.
    JobDuration,
    /// An HPA's metrics, current over target.
    HpaTargets,
    /// The controlling owner, `kind.group/name` in lowercase (ControllerRevisions).
    Controller,
    /// A Service's external IPs or load balancer ingress.
    ServiceExternalIp,
    /// A Service's ports, `80/TCP,443:30443/TCP`.
    ServicePorts,
    /// An Endpoints' addresses, `ip:port`, three at most.
    Endpoints,
    /// An EndpointSlice's ports.
    EndpointSlicePorts,
    /// An EndpointSlice's addresses.
    EndpointSliceEndpoints,
    /// An Ingress's rule hosts.
    IngressHosts,
    /// The load balancer ingress of `status.loadBalancer` (Ingresses).
    LoadBalancerIngress,
    /// An Ingress's ports: `80`, or `80, 443` with TLS.
    IngressPorts,
    /// An IngressClass's parameters reference.
    IngressClassParameters,
    /// An IPAddress's parent reference.
    IpAddressParentRef,
    /// When an event was last seen (series, last timestamp, first timestamp, event time).
    EventLastSeen,
    /// When an event was first seen.
    EventFirstSeen,
    /// How many times an event occurred.
    EventCount,
    /// The event's object, `kind/name` with the kind in lowercase.
    EventObject,
    /// The event's object's field path.
    EventSubobject,
    /// The event's source: component (or reporting controller) and host (or instance).
    EventSource,
    /// The event's message, trimmed.
    EventMessage,
    /// A volume's or claim's phase, `Terminating` once deleted.
    VolumePhase,
    /// A volume's or claim's storage class (the beta annotation first).
    VolumeClass,
    /// A volume's claim, `namespace/name`.
    PvClaim,
    /// A claim's bound capacity.
    PvcCapacity,
    /// A claim's bound access modes.
    PvcAccessModes,
    /// A StorageClass's name, with ` (default)` for the default class.
    StorageClassName,
    /// A CSIDriver's token request audiences.
    CsiTokenRequests,
    /// A binding's User subjects.
    SubjectsUsers,
    /// A binding's Group subjects.
    SubjectsGroups,
    /// A binding's ServiceAccount subjects, `namespace/name`.
    SubjectsServiceAccounts,
    /// A CSR's condition: Approved, Denied or Pending, and Failed, Issued.
    CsrCondition,
    /// A CSR's requested duration.
    CsrRequestedDuration,
    /// A ValidatingAdmissionPolicy's param kind.
    ParamKind,
    /// A ValidatingAdmissionPolicyBinding's param reference.
    ParamRef,
    /// A ResourceQuota's requests, `used/hard` per resource.
    ResourceQuotaRequest,
    /// A ResourceQuota's limits.
    ResourceQuotaLimit,
    /// A FlowSchema's Dangling condition.
    FlowSchemaDangling,
    /// A ResourceClaim's state.
    ResourceClaimState,
    /// An APIService's service, or `Local`.
    ApiServiceService,
    /// An APIService's availability.
    ApiServiceAvailable,
    /// A ConfigMap's entries, `data` and `binaryData` together.
    ConfigMapData,
    /// A CustomResourceDefinition's `additionalPrinterColumns` entry, as apiextensions' table
    /// convertor fills it: nothing (null) when the path is absent; a string column prints the
    /// value as text; an integer, number or boolean column holds the value only when it has that
    /// type; a date column the age of the timestamp (`<invalid>` when it is not one).
    CrdCell,
}

impl Computed {
    /// Whether the cell reads the column's `json_path`.
    fn takes_path(self) -> bool {
        matches!(
            self,
            Computed::Since
                | Computed::Size
                | Computed::Join
                | Computed::Containers
                | Computed::Images
                | Computed::LabelSelector
                | Computed::Labels
                | Computed::BoolText
                | Computed::Text
                | Computed::KindName
                | Computed::AccessModes
                | Computed::CrdCell
        )
    }
}

/// One declared printer column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrinterColumn {
    /// The header, e.g. `READY`.
    pub name: String,
    /// The OpenAPI type of the cell: `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    /// A format hint for the type (`name` for the NAME column), possibly empty.
    pub format: String,
    /// What the column shows.
    pub description: String,
    /// 0 for the default columns, 1 and more for `-o wide`.
    pub priority: u32,
    /// Where the cell's value is read from, as dotted segments (`status.podIP`, `[0]` indexes a list).
    pub json_path: Vec<PathSegment>,
    /// A computed cell instead of (or, for the computed cells that read a path, on top of) the
    /// path.
    pub computed: Option<Computed>,
    /// The cell when the value is absent, as upstream's printer writes it for a field the
    /// object leaves out (`""`, `0`, `false`, `<none>`, `<unset>`...). Without it: `<none>` for
    /// strings and `null` for numbers and booleans, as a CRD's column shows.
    pub missing: Option<Value>,
    /// A cell upstream's printer writes past its column definitions (IPAddress's age): in every
    /// row, never in `columnDefinitions`.
    pub hidden: bool,
}

/// One step of a printer column's JSONPath.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathSegment {
    /// A member of an object.
    Field(String),
    /// An element of a list.
    Index(usize),
}

/// A column as written in a definition file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawColumn {
    name: String,
    #[serde(default = "string_type", rename = "type")]
    type_: String,
    #[serde(default)]
    format: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    priority: u32,
    #[serde(default)]
    json_path: Option<String>,
    #[serde(default)]
    computed: Option<Computed>,
    #[serde(default)]
    missing: Option<toml::Value>,
    #[serde(default)]
    hidden: bool,
}

fn string_type() -> String {
    "string".into()
}

impl RawColumn {
    pub(crate) fn compile(self) -> Result<PrinterColumn, String> {
        if self.name.is_empty() {
            return Err("a column needs a name".into());
        }
        if !matches!(
            self.type_.as_str(),
            "string" | "integer" | "number" | "boolean" | "date"
        ) {
            return Err(format!(
                "column {}: type \"{}\" must be string, integer, number, boolean or date",
                self.name, self.type_
            ));
        }
        let json_path = match &self.json_path {
            Some(p) => parse_json_path(p).map_err(|m| format!("column {}: {m}", self.name))?,
            None => Vec::new(),
        };
        match (self.computed, json_path.is_empty()) {
            (None, true) => {
                return Err(format!(
                    "column {}: set `json_path` or `computed`",
                    self.name
                ));
            }
            (Some(c), true) if c.takes_path() => {
                return Err(format!(
                    "column {}: computed = \"{}\" reads `json_path`, which is missing",
                    self.name,
                    kebab(c)
                ));
            }
            _ => {}
        }
        let missing = match self.missing {
            None => None,
            Some(toml::Value::String(s)) => Some(Value::String(s)),
            Some(toml::Value::Integer(i)) => Some(json!(i)),
            Some(toml::Value::Boolean(b)) => Some(Value::Bool(b)),
            Some(other) => {
                return Err(format!(
                    "column {}: missing = {other} must be a string, an integer or a boolean",
                    self.name
                ));
            }
        };
        Ok(PrinterColumn {
            name: self.name,
            type_: self.type_,
            format: self.format,
            description: self.description,
            priority: self.priority,
            json_path,
            computed: self.computed,
            missing,
            hidden: self.hidden,
        })
    }
}

/// apiextensions' `cellForJSONValue`, and its JSONPath printing of a string column's value.
fn crd_cell(type_: &str, v: Option<&Value>, now: SystemTime) -> Value {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Value::Null;
    };
    match (type_, v) {
        ("string", Value::String(s)) => Value::String(s.clone()),
        // JSONPath prints any other value as its JSON text (maps and lists too).
        ("string", other) => Value::String(other.to_string()),
        ("integer", Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .map_or(Value::Null, |i| json!(i)),
        ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, |f| json!(f)),
        ("boolean", Value::Bool(b)) => Value::Bool(*b),
        ("date", Value::String(s)) => match crate::model::printers::parse_timestamp(s) {
            Some(_) => Value::String(crate::model::printers::since(Some(s), now)),
            None => Value::String("<invalid>".into()),
        },
        _ => Value::Null,
    }
}

/// A computed cell's name as written in definition files.
fn kebab(c: Computed) -> String {
    let debug = format!("{c:?}");
    let mut out = String::new();
    for (i, ch) in debug.chars().enumerate() {
        if ch.is_ascii_uppercase() {
            if i > 0 {
                out.push('-');
            }
            out.push(ch.to_ascii_lowercase());
        } else {
            out.push(ch);
        }
    }
    out
}

/// Parses a CRD-style JSONPath: `.spec.nodeName`, `.status.conditions[0].type` (the leading dot is
/// optional). Filters, wildcards and recursive descent are not supported: they are rejected.
fn parse_json_path(text: &str) -> Result<Vec<PathSegment>, String> {
    let t = text.strip_prefix('.').unwrap_or(text);
    let mut out = Vec::new();
    for part in t.split('.') {
        let (field, mut rest) = part.split_once('[').map_or((part, ""), |(f, r)| (f, r));
        let valid = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
        };
        if !valid(field) {
            return Err(format!(
                "json_path \"{text}\": segment \"{part}\" is not a field name (filters and wildcards are not supported)"
            ));
        }
        out.push(PathSegment::Field(field.to_owned()));
        while !rest.is_empty() {
            let (n, after) = rest
                .split_once(']')
                .ok_or_else(|| format!("json_path \"{text}\": unclosed ["))?;
            let i: usize = n
                .parse()
                .map_err(|_| format!("json_path \"{text}\": [{n}] is not a list index"))?;
            out.push(PathSegment::Index(i));
            rest = after.strip_prefix('[').unwrap_or(after);
            if !after.is_empty() && !after.starts_with('[') {
                return Err(format!("json_path \"{text}\": unexpected \"{after}\""));
            }
        }
    }
    Ok(out)
}

/// The value at a path, if present.
fn at<'a>(v: &'a Value, path: &[PathSegment]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, s| match s {
        PathSegment::Field(f) => v.get(f),
        PathSegment::Index(i) => v.get(i),
    })
}

impl PrinterColumn {
    /// The column's definition in a `meta.k8s.io` Table.
    pub fn definition(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.type_,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        })
    }

    /// The cell for an object (its JSON DOM), at time `now`. A missing value is the column's
    /// `missing`, else `<none>` (as kubectl's column printer shows it) except for numbers and
    /// booleans, where upstream leaves the cell empty (null).
    pub fn cell(&self, obj: &Value, now: SystemTime) -> Value {
        use crate::model::printers as p;
        // Absent, null, or (where the column says what upstream shows for none) empty.
        let empty = |v: &Value| v.is_null() || (self.missing.is_some() && v.as_str() == Some(""));
        let at_path = at(obj, &self.json_path).filter(|v| !empty(v));
        let missing = |default: &str| {
            self.missing
                .clone()
                .unwrap_or_else(|| Value::String(default.to_owned()))
        };
        let text = |s: String| Value::String(s);
        let or_missing = |s: String, default: &str| {
            if s.is_empty() {
                missing(default)
            } else {
                Value::String(s)
            }
        };
        let Some(computed) = self.computed else {
            return match at_path {
                None => match (&self.missing, self.type_.as_str()) {
                    (Some(m), _) => m.clone(),
                    (None, "integer" | "number" | "boolean") => Value::Null,
                    (None, _) => Value::String("<none>".into()),
                },
                Some(Value::String(s)) => Value::String(s.clone()),
                Some(v @ (Value::Number(_) | Value::Bool(_))) => v.clone(),
                Some(v) => Value::String(v.to_string()),
            };
        };
        let path_list = || {
            at_path
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice)
        };
        match computed {
            Computed::CrdCell => crd_cell(&self.type_, at(obj, &self.json_path), now),
            Computed::Age => text(p::since(
                p::get(obj, "metadata.creationTimestamp").and_then(Value::as_str),
                now,
            )),
            Computed::Since => match at_path.and_then(Value::as_str) {
                Some(t) => text(p::since(Some(t), now)),
                None => missing("<unknown>"),
            },
            Computed::Size => json!(match at_path {
                Some(Value::Object(m)) => m.len(),
                Some(Value::Array(a)) => a.len(),
                _ => 0,
            }),
            Computed::Join => or_missing(
                path_list()
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(","),
                "",
            ),
            Computed::Containers => text(p::containers(path_list(), "name")),
            Computed::Images => text(p::containers(path_list(), "image")),
            Computed::LabelSelector => match p::label_selector(at_path) {
                Ok(s) => or_missing(s, "<none>"),
                Err(()) => text("<error>".into()),
            },
            Computed::Labels => match p::format_labels(at_path).as_str() {
                "<none>" => missing("<none>"),
                s => text(s.to_owned()),
            },
            Computed::BoolText => p::bool_text(at_path).map_or_else(|| missing("<unset>"), text),
            Computed::Text => at_path.map_or_else(|| missing("<none>"), |v| text(p::text_of(v))),
            Computed::KindName => at_path.map_or_else(|| missing("/"), |r| text(p::kind_name(r))),
            Computed::AccessModes => text(p::access_modes(path_list())),
            Computed::PodReady => text(p::pod_ready(obj)),
            Computed::PodStatus => text(p::pod_status(obj)),
            Computed::PodRestarts => text(p::pod_restarts(obj, now)),
            Computed::PodReadinessGates => text(p::pod_readiness_gates(obj)),
            Computed::NodeStatus => text(p::node_status(obj)),
            Computed::NodeRoles => text(p::node_roles(obj)),
            Computed::NodeInternalIp => text(p::node_address(obj, "InternalIP")),
            Computed::NodeExternalIp => text(p::node_address(obj, "ExternalIP")),
            Computed::ReadyReplicas => text(p::ready_replicas(obj)),
            Computed::JobStatus => text(p::job_status(obj)),
            Computed::JobCompletions => text(p::job_completions(obj)),
            Computed::JobDuration => text(p::job_duration(obj, now)),
            Computed::HpaTargets => text(p::hpa_targets(obj)),
            Computed::Controller => text(p::controller_of(obj)),
            Computed::ServiceExternalIp => text(p::service_external_ip(obj)),
            Computed::ServicePorts => text(p::service_ports(obj)),
            Computed::Endpoints => text(p::endpoints(obj)),
            Computed::EndpointSlicePorts => text(p::endpoint_slice_ports(obj)),
            Computed::EndpointSliceEndpoints => text(p::endpoint_slice_endpoints(obj)),
            Computed::IngressHosts => text(p::ingress_hosts(obj)),
            Computed::LoadBalancerIngress => text(p::load_balancer_ingress(obj)),
            Computed::IngressPorts => text(
                if p::list(obj, "spec.tls").is_empty() {
                    "80"
                } else {
                    "80, 443"
                }
                .into(),
            ),
            Computed::IngressClassParameters => text(p::ingress_class_parameters(obj)),
            Computed::IpAddressParentRef => text(p::ip_address_parent_ref(obj)),
            Computed::EventLastSeen => text(p::event_last_seen(obj, now)),
            Computed::EventFirstSeen => text(p::event_first_seen(obj, now)),
            Computed::EventCount => json!(p::event_count(obj)),
            Computed::EventObject => text(p::event_object(obj)),
            Computed::EventSubobject => text(p::event_subobject(obj)),
            Computed::EventSource => text(p::event_source(obj)),
            Computed::EventMessage => text(p::event_message(obj)),
            Computed::VolumePhase => text(p::volume_phase(obj)),
            Computed::VolumeClass => text(p::volume_class(obj)),
            Computed::PvClaim => text(p::pv_claim(obj)),
            Computed::PvcCapacity => text(p::pvc_capacity(obj)),
            Computed::PvcAccessModes => text(p::pvc_access_modes(obj)),
            Computed::StorageClassName => text(p::storage_class_name(obj)),
            Computed::CsiTokenRequests => text(p::csi_token_requests(obj)),
            Computed::SubjectsUsers => text(p::subjects(obj, "User")),
            Computed::SubjectsGroups => text(p::subjects(obj, "Group")),
            Computed::SubjectsServiceAccounts => text(p::subjects(obj, "ServiceAccount")),
            Computed::CsrCondition => text(p::csr_condition(obj)),
            Computed::CsrRequestedDuration => text(p::csr_requested_duration(obj)),
            Computed::ParamKind => text(p::param_kind(obj)),
            Computed::ParamRef => text(p::param_ref(obj)),
            Computed::ResourceQuotaRequest => text(p::resource_quota(obj, false)),
            Computed::ResourceQuotaLimit => text(p::resource_quota(obj, true)),
            Computed::FlowSchemaDangling => text(p::flow_schema_dangling(obj)),
            Computed::ResourceClaimState => text(p::resource_claim_state(obj)),
            Computed::ApiServiceService => text(p::api_service_service(obj)),
            Computed::ApiServiceAvailable => text(p::api_service_available(obj)),
            Computed::ConfigMapData => p::config_map_data(obj),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(text: &str) -> Result<PrinterColumn, String> {
        toml::from_str::<RawColumn>(text)
            .map_err(|e| e.to_string())
            .and_then(RawColumn::compile)
    }

    #[test]
    fn json_paths_parse_and_bad_ones_are_rejected() {
        let c = col("name='X'\njson_path='.status.conditions[0].type'").unwrap();
        assert_eq!(
            c.json_path,
            vec![
                PathSegment::Field("status".into()),
                PathSegment::Field("conditions".into()),
                PathSegment::Index(0),
                PathSegment::Field("type".into()),
            ]
        );
        for bad in [".a[?(@.x)]", ".a..b", ".a[x]", ".*", ".a[0"] {
            let e = col(&format!("name='X'\njson_path='{bad}'")).unwrap_err();
            assert!(e.contains("json_path"), "{bad}: {e}");
        }
        assert!(col("name='X'").unwrap_err().contains("json_path"));
        assert!(
            col("name='X'\ncomputed='size'")
                .unwrap_err()
                .contains("size")
        );
        assert!(
            col("name='X'\ncomputed='age'\ntype='text'")
                .unwrap_err()
                .contains("type")
        );
    }

    #[test]
    fn cells_follow_the_column_printer() {
        let obj = json!({"spec": {"n": 3, "m": {"a": "1", "b": "2"}, "l": [{"x": "y"}]}});
        let now = SystemTime::now();
        let cell = |t: &str| col(t).unwrap().cell(&obj, now);
        assert_eq!(cell("name='X'\njson_path='.spec.l[0].x'"), json!("y"));
        assert_eq!(
            cell("name='X'\ntype='integer'\njson_path='.spec.n'"),
            json!(3)
        );
        assert_eq!(cell("name='X'\njson_path='.spec.missing'"), json!("<none>"));
        assert_eq!(
            cell("name='X'\ntype='integer'\njson_path='.spec.missing'"),
            Value::Null
        );
        assert_eq!(
            cell("name='X'\ntype='integer'\ncomputed='size'\njson_path='.spec.m'"),
            json!(2)
        );
        // What upstream's printers show for an absent field.
        assert_eq!(
            cell("name='X'\njson_path='.spec.gone'\nmissing=''"),
            json!("")
        );
        assert_eq!(
            cell("name='X'\njson_path='.spec.gone'\nmissing=0"),
            json!(0)
        );
        assert_eq!(
            cell("name='X'\njson_path='.spec.gone'\nmissing=false"),
            json!(false)
        );
        assert_eq!(
            cell("name='X'\ncomputed='text'\njson_path='.spec.n'"),
            json!("3")
        );
        assert_eq!(
            cell("name='X'\ncomputed='text'\njson_path='.spec.gone'\nmissing='N/A'"),
            json!("N/A")
        );
        assert_eq!(
            cell("name='X'\ncomputed='bool-text'\njson_path='.spec.gone'"),
            json!("<unset>")
        );
        assert_eq!(
            cell("name='X'\ncomputed='since'\njson_path='.spec.gone'\nmissing='<none>'"),
            json!("<none>")
        );
        assert_eq!(
            cell("name='X'\ncomputed='labels'\njson_path='.spec.m'"),
            json!("a=1,b=2")
        );
        assert!(
            col("name='X'\ncomputed='label-selector'")
                .unwrap_err()
                .contains("computed = \"label-selector\" reads `json_path`")
        );
        assert!(
            col("name='X'\njson_path='.a'\nmissing=1.5")
                .unwrap_err()
                .contains("missing")
        );
    }
}
