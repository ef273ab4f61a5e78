//! Printer columns: what `kubectl get` shows for a resource, declared per definition the way a CRD
//! declares `additionalPrinterColumns` (a name, a type, a JSONPath, a priority), plus a few computed
//! cells that upstream's built-in printers derive from several fields (a pod's READY, STATUS and
//! RESTARTS, a node's STATUS, an object's AGE).
//!
//! Cells are computed from an object's JSON DOM; this is the Table path (kubectl's output), not the
//! watch hot path, and each cell follows upstream's printer (`pkg/printers/internalversion`).

use std::time::{Duration, SystemTime};

use serde::Deserialize;
use serde_json::{Value, json};

/// A cell that no single JSONPath gives: computed as upstream's printer does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Computed {
    /// Time since `metadata.creationTimestamp`, as kubectl prints durations (`5m`, `3d4h`).
    Age,
    /// Ready containers over containers, `1/2`.
    PodReady,
    /// The pod's status reason: `Running`, `Completed`, `CrashLoopBackOff`, `Init:0/1`,
    /// `Terminating`...
    PodStatus,
    /// Restarts summed over containers, with the last one's age: `3 (5m ago)`.
    PodRestarts,
    /// `Ready`, `NotReady` or `Unknown` from the node's Ready condition, plus
    /// `,SchedulingDisabled` when cordoned.
    NodeStatus,
    /// The number of entries of the map or list at the column's `json_path`.
    Size,
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
    /// A computed cell instead of (or, for [`Computed::Size`], on top of) the path.
    pub computed: Option<Computed>,
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
            (Some(Computed::Size), true) => {
                return Err(format!(
                    "column {}: computed = \"size\" counts the entries at `json_path`, which is missing",
                    self.name
                ));
            }
            _ => {}
        }
        Ok(PrinterColumn {
            name: self.name,
            type_: self.type_,
            format: self.format,
            description: self.description,
            priority: self.priority,
            json_path,
            computed: self.computed,
        })
    }
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

fn get<'a>(v: &'a Value, dotted: &str) -> Option<&'a Value> {
    dotted.split('.').try_fold(v, |v, f| v.get(f))
}

fn str_at<'a>(v: &'a Value, dotted: &str) -> &'a str {
    get(v, dotted).and_then(Value::as_str).unwrap_or_default()
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

    /// The cell for an object (its JSON DOM), at time `now`. A missing value is `<none>`, as
    /// kubectl's column printer shows it... except for numbers, where upstream leaves the cell empty
    /// (null).
    pub fn cell(&self, obj: &Value, now: SystemTime) -> Value {
        match self.computed {
            Some(Computed::Age) => Value::String(age(obj, now)),
            Some(Computed::PodReady) => Value::String(pod_ready(obj)),
            Some(Computed::PodStatus) => Value::String(pod_status(obj)),
            Some(Computed::PodRestarts) => Value::String(pod_restarts(obj, now)),
            Some(Computed::NodeStatus) => Value::String(node_status(obj)),
            Some(Computed::Size) => {
                let n = match at(obj, &self.json_path) {
                    Some(Value::Object(m)) => m.len(),
                    Some(Value::Array(a)) => a.len(),
                    _ => 0,
                };
                json!(n)
            }
            None => match at(obj, &self.json_path) {
                None | Some(Value::Null) => match self.type_.as_str() {
                    "integer" | "number" | "boolean" => Value::Null,
                    _ => Value::String("<none>".into()),
                },
                Some(Value::String(s)) => Value::String(s.clone()),
                Some(v @ (Value::Number(_) | Value::Bool(_))) => v.clone(),
                Some(v) => Value::String(v.to_string()),
            },
        }
    }
}

/// kubectl's `ShortHumanDuration`-style age (`duration.HumanDuration`): `45s`, `5m`, `3h`, `2d`,
/// `3d4h`, `2y`.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s < 120 {
        return format!("{s}s");
    }
    let m = s / 60;
    if m < 10 {
        let rs = s % 60;
        return if rs == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{rs}s")
        };
    }
    if m < 180 {
        return format!("{m}m");
    }
    let h = s / 3600;
    if h < 8 {
        let rm = m % 60;
        return if rm == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{rm}m")
        };
    }
    if h < 48 {
        return format!("{h}h");
    }
    if h < 24 * 8 {
        let rh = h % 24;
        return if rh == 0 {
            format!("{}d", h / 24)
        } else {
            format!("{}d{rh}h", h / 24)
        };
    }
    if h < 24 * 365 * 2 {
        return format!("{}d", h / 24);
    }
    if h < 24 * 365 * 8 {
        let dy = (h / 24) % 365;
        return if dy == 0 {
            format!("{}y", h / 24 / 365)
        } else {
            format!("{}y{dy}d", h / 24 / 365)
        };
    }
    format!("{}y", h / 24 / 365)
}

/// Parses an RFC 3339 UTC timestamp as the API writes them (`2026-11-23T03:49:22Z`).
pub fn parse_timestamp(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || !s.ends_with('Z') {
        return None;
    }
    let n = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (n(0..4)?, n(5..7)?, n(8..10)?);
    let (h, mi, se) = (n(11..13)?, n(14..16)?, n(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + se;
    u64::try_from(secs)
        .ok()
        .map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s))
}

fn since(ts: &str, now: SystemTime) -> Option<String> {
    let t = parse_timestamp(ts)?;
    Some(human_duration(now.duration_since(t).unwrap_or_default()))
}

fn age(obj: &Value, now: SystemTime) -> String {
    since(str_at(obj, "metadata.creationTimestamp"), now).unwrap_or_else(|| "<unknown>".into())
}

fn list<'a>(v: &'a Value, dotted: &str) -> &'a [Value] {
    get(v, dotted)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn pod_ready(pod: &Value) -> String {
    let total = list(pod, "spec.containers").len();
    let ready = list(pod, "status.containerStatuses")
        .iter()
        .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
        .count();
    format!("{ready}/{total}")
}

fn pod_restarts(pod: &Value, now: SystemTime) -> String {
    let mut restarts = 0;
    let mut last: Option<SystemTime> = None;
    for c in list(pod, "status.containerStatuses") {
        restarts += c.get("restartCount").and_then(Value::as_i64).unwrap_or(0);
        if let Some(t) = get(c, "lastState.terminated.finishedAt")
            .and_then(Value::as_str)
            .and_then(parse_timestamp)
        {
            last = Some(last.map_or(t, |l| l.max(t)));
        }
    }
    match last {
        Some(t) if restarts > 0 => format!(
            "{restarts} ({} ago)",
            human_duration(now.duration_since(t).unwrap_or_default())
        ),
        _ => restarts.to_string(),
    }
}

/// Upstream's `printPod` reason logic, for the parts that read the object alone.
fn pod_status(pod: &Value) -> String {
    let mut reason = str_at(pod, "status.phase").to_owned();
    if let Some(r) = get(pod, "status.reason").and_then(Value::as_str) {
        reason = r.to_owned();
    }
    // A pod held by scheduling gates says so (the condition its creation adds).
    if list(pod, "status.conditions")
        .iter()
        .any(|c| str_at(c, "type") == "PodScheduled" && str_at(c, "reason") == "SchedulingGated")
    {
        reason = "SchedulingGated".to_owned();
    }
    // Init containers first: a pod whose init containers have not finished shows Init:i/n.
    let inits = list(pod, "status.initContainerStatuses");
    let n_init = list(pod, "spec.initContainers").len();
    let mut initializing = false;
    for (i, c) in inits.iter().enumerate() {
        let term = get(c, "state.terminated");
        if term.and_then(|t| t.get("exitCode")).and_then(Value::as_i64) == Some(0) {
            continue;
        }
        // A restartable (sidecar) init container that started counts as done.
        if c.get("started").and_then(Value::as_bool) == Some(true)
            && list(pod, "spec.initContainers")
                .get(i)
                .and_then(|s| s.get("restartPolicy"))
                .and_then(Value::as_str)
                == Some("Always")
        {
            continue;
        }
        initializing = true;
        reason = if let Some(t) = term {
            let r = str_at(t, "reason");
            if !r.is_empty() {
                format!("Init:{r}")
            } else if let Some(sig) = t.get("signal").and_then(Value::as_i64).filter(|s| *s != 0) {
                format!("Init:Signal:{sig}")
            } else {
                format!(
                    "Init:ExitCode:{}",
                    t.get("exitCode").and_then(Value::as_i64).unwrap_or(0)
                )
            }
        } else {
            let waiting = str_at(c, "state.waiting.reason");
            if !waiting.is_empty() && waiting != "PodInitializing" {
                format!("Init:{waiting}")
            } else {
                format!("Init:{i}/{n_init}")
            }
        };
        break;
    }
    if !initializing {
        let mut has_running = false;
        for c in list(pod, "status.containerStatuses").iter().rev() {
            let waiting = str_at(c, "state.waiting.reason");
            let term = get(c, "state.terminated");
            if !waiting.is_empty() {
                reason = waiting.to_owned();
            } else if let Some(t) = term {
                let r = str_at(t, "reason");
                reason = if !r.is_empty() {
                    r.to_owned()
                } else if let Some(sig) =
                    t.get("signal").and_then(Value::as_i64).filter(|s| *s != 0)
                {
                    format!("Signal:{sig}")
                } else {
                    format!(
                        "ExitCode:{}",
                        t.get("exitCode").and_then(Value::as_i64).unwrap_or(0)
                    )
                };
            } else if c.get("ready").and_then(Value::as_bool) == Some(true)
                && get(c, "state.running").is_some()
            {
                has_running = true;
            }
        }
        // A Completed container with another still running: the pod is Running (or NotReady).
        if reason == "Completed" && has_running {
            let ready = list(pod, "status.conditions")
                .iter()
                .any(|c| str_at(c, "type") == "Ready" && str_at(c, "status") == "True");
            reason = if ready { "Running" } else { "NotReady" }.into();
        }
    }
    if get(pod, "metadata.deletionTimestamp").is_some_and(|v| !v.is_null()) {
        reason = if str_at(pod, "status.reason") == "NodeLost" {
            "Unknown".into()
        } else {
            "Terminating".into()
        };
    }
    reason
}

fn node_status(node: &Value) -> String {
    let ready = list(node, "status.conditions")
        .iter()
        .find(|c| str_at(c, "type") == "Ready")
        .map(|c| str_at(c, "status"));
    let mut s = match ready {
        Some("True") => "Ready".to_owned(),
        Some(_) => "NotReady".to_owned(),
        None => "Unknown".to_owned(),
    };
    if get(node, "spec.unschedulable").and_then(Value::as_bool) == Some(true) {
        s.push_str(",SchedulingDisabled");
    }
    s
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
        let obj = json!({"spec": {"n": 3, "m": {"a": 1, "b": 2}, "l": [{"x": "y"}]}});
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
    }

    #[test]
    fn durations_print_as_kubectl_does() {
        for (s, want) in [
            (5, "5s"),
            (119, "119s"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600 + 60, "3h1m"),
            (9 * 3600, "9h"),
            (3 * 86_400 + 4 * 3600, "3d4h"),
            (30 * 86_400, "30d"),
            (3 * 365 * 86_400, "3y"),
        ] {
            assert_eq!(human_duration(Duration::from_secs(s)), want, "{s}");
        }
        let t = parse_timestamp("2026-11-23T03:49:22Z").unwrap();
        assert_eq!(
            t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs(),
            1_795_405_762
        );
        assert!(parse_timestamp("2026-13-01T00:00:00Z").is_none());
        assert!(parse_timestamp("yesterday").is_none());
    }

    #[test]
    fn pod_cells_follow_upstreams_printer() {
        let pod = json!({
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 1,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
            ]}
        });
        assert_eq!(pod_ready(&pod), "1/2");
        assert_eq!(pod_status(&pod), "CrashLoopBackOff");
        assert_eq!(pod_restarts(&pod, SystemTime::now()), "3");
        let init = json!({
            "spec": {"initContainers": [{"name": "i"}], "containers": [{"name": "a"}]},
            "status": {"phase": "Pending", "initContainerStatuses": [
                {"name": "i", "state": {"waiting": {"reason": "PodInitializing"}}}]}
        });
        assert_eq!(pod_status(&init), "Init:0/1");
        let done = json!({"status": {"phase": "Succeeded", "containerStatuses": [
            {"name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]},
            "metadata": {}});
        assert_eq!(pod_status(&done), "Completed");
        let deleting = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"phase": "Running"}});
        assert_eq!(pod_status(&deleting), "Terminating");
        let gated = json!({"status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}});
        assert_eq!(pod_status(&gated), "SchedulingGated");
        let node = json!({"spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        assert_eq!(node_status(&node), "Ready,SchedulingDisabled");
    }
}
