//! Computed Table cells: what kube-apiserver's built-in printers (`pkg/printers/internalversion`,
//! and kube-aggregator's for APIServices) derive from several fields of an object, written over
//! the object's JSON DOM. Each function follows one upstream helper; where upstream reads the
//! internal Go type, the JSON of the served version is read instead (for events, both the core
//! `v1` shape and the `events.k8s.io/v1` one).
//!
//! This is the Table path (kubectl's output), not the watch hot path: clarity over speed.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

/// kubectl's `duration.HumanDuration`: `45s`, `5m`, `3h`, `2d`, `3d4h`, `2y`.
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

/// Parses an RFC 3339 UTC timestamp as the API writes them: `Time` (`2026-11-23T03:49:22Z`) and
/// `MicroTime` (`2026-11-23T03:49:22.123456Z`).
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
    // An optional fraction: `.` then up to nine digits before the `Z`.
    let nanos = match s.get(19..s.len() - 1)? {
        "" => 0,
        f => {
            let digits = f.strip_prefix('.')?;
            if digits.is_empty() || digits.len() > 9 || !digits.bytes().all(|c| c.is_ascii_digit())
            {
                return None;
            }
            digits.parse::<u32>().ok()? * 10u32.pow(9 - digits.len() as u32)
        }
    };
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
        .map(|s| SystemTime::UNIX_EPOCH + Duration::new(s, nanos))
}

/// Upstream's `translateTimestampSince`: the time since a timestamp, `<unknown>` when it is unset.
pub(crate) fn since(ts: Option<&str>, now: SystemTime) -> String {
    match ts.and_then(parse_timestamp) {
        Some(t) => human_duration(now.duration_since(t).unwrap_or_default()),
        None => "<unknown>".into(),
    }
}

pub(crate) fn get<'a>(v: &'a Value, dotted: &str) -> Option<&'a Value> {
    dotted
        .split('.')
        .try_fold(v, |v, f| v.get(f))
        .filter(|v| !v.is_null())
}

pub(crate) fn str_at<'a>(v: &'a Value, dotted: &str) -> &'a str {
    get(v, dotted).and_then(Value::as_str).unwrap_or_default()
}

fn int_at(v: &Value, dotted: &str) -> i64 {
    get(v, dotted).and_then(Value::as_i64).unwrap_or(0)
}

pub(crate) fn list<'a>(v: &'a Value, dotted: &str) -> &'a [Value] {
    get(v, dotted)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn first_non_empty<'a>(a: &'a str, b: &'a str) -> &'a str {
    if a.is_empty() { b } else { a }
}

/// A number or a string as the text Go's `%v` or `IntOrString.String()` prints.
pub(crate) fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => other.to_string(),
    }
}

/// `printBoolPtr`: `True`, `False`, or `<unset>` when the field is absent (the column's
/// `missing` overrides that).
pub(crate) fn bool_text(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_bool)
        .map(|b| if b { "True" } else { "False" }.to_owned())
}

// ---- pods and nodes ----

/// What upstream's `printPod` (1.35) derives from a pod's statuses in one walk: READY, STATUS
/// and RESTARTS come out of the same loop there (a container waiting or terminated is not counted
/// ready even when its `ready` says so), so they are computed together here.
struct PodSummary {
    ready: usize,
    total: usize,
    reason: String,
    restarts: i64,
    last_restart: Option<SystemTime>,
}

fn terminated_reason(t: &Value, prefix: &str) -> String {
    let r = str_at(t, "reason");
    if !r.is_empty() {
        format!("{prefix}{r}")
    } else if let Some(sig) = t.get("signal").and_then(Value::as_i64).filter(|s| *s != 0) {
        format!("{prefix}Signal:{sig}")
    } else {
        format!(
            "{prefix}ExitCode:{}",
            t.get("exitCode").and_then(Value::as_i64).unwrap_or(0)
        )
    }
}

fn condition_true(pod: &Value, kind: &str) -> bool {
    list(pod, "status.conditions")
        .iter()
        .any(|c| str_at(c, "type") == kind && str_at(c, "status") == "True")
}

fn summarize_pod(pod: &Value) -> PodSummary {
    let finished = |c: &Value| {
        get(c, "lastState.terminated.finishedAt")
            .and_then(Value::as_str)
            .and_then(parse_timestamp)
    };
    let later = |a: Option<SystemTime>, b: Option<SystemTime>| match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    };
    let init_specs = list(pod, "spec.initContainers");
    let restartable = |name: &str| {
        init_specs
            .iter()
            .find(|s| str_at(s, "name") == name)
            .is_some_and(|s| str_at(s, "restartPolicy") == "Always")
    };
    let total = list(pod, "spec.containers").len()
        + init_specs
            .iter()
            .filter(|s| str_at(s, "restartPolicy") == "Always")
            .count();
    let phase = str_at(pod, "status.phase");
    let mut reason = phase.to_owned();
    let status_reason = str_at(pod, "status.reason");
    if !status_reason.is_empty() {
        reason = status_reason.to_owned();
    }
    if list(pod, "status.conditions")
        .iter()
        .any(|c| str_at(c, "type") == "PodScheduled" && str_at(c, "reason") == "SchedulingGated")
    {
        reason = "SchedulingGated".to_owned();
    }
    let (mut ready, mut restarts, mut last_restart) = (0, 0, None);
    let (mut sidecar_restarts, mut sidecar_last) = (0, None);
    let mut initializing = false;
    let n_init = init_specs.len();
    for (i, c) in list(pod, "status.initContainerStatuses").iter().enumerate() {
        let count = c.get("restartCount").and_then(Value::as_i64).unwrap_or(0);
        restarts += count;
        last_restart = later(last_restart, finished(c));
        let sidecar = restartable(str_at(c, "name"));
        if sidecar {
            sidecar_restarts += count;
            sidecar_last = later(sidecar_last, finished(c));
        }
        let term = get(c, "state.terminated");
        let waiting = str_at(c, "state.waiting.reason");
        if term.and_then(|t| t.get("exitCode")).and_then(Value::as_i64) == Some(0) {
            continue;
        }
        if sidecar && c.get("started").and_then(Value::as_bool) == Some(true) {
            if c.get("ready").and_then(Value::as_bool) == Some(true) {
                ready += 1;
            }
            continue;
        }
        reason = if let Some(t) = term {
            terminated_reason(t, "Init:")
        } else if !waiting.is_empty() && waiting != "PodInitializing" {
            format!("Init:{waiting}")
        } else {
            format!("Init:{i}/{n_init}")
        };
        initializing = true;
        break;
    }
    if !initializing || condition_true(pod, "Initialized") {
        restarts = sidecar_restarts;
        last_restart = sidecar_last;
        let mut has_running = false;
        let mut error_reason = String::new();
        for c in list(pod, "status.containerStatuses").iter().rev() {
            restarts += c.get("restartCount").and_then(Value::as_i64).unwrap_or(0);
            last_restart = later(last_restart, finished(c));
            let waiting = str_at(c, "state.waiting.reason");
            if !waiting.is_empty() {
                reason = waiting.to_owned();
            } else if let Some(t) = get(c, "state.terminated") {
                reason = terminated_reason(t, "");
                if t.get("exitCode").and_then(Value::as_i64).unwrap_or(0) != 0 {
                    error_reason = reason.clone();
                }
            } else if c.get("ready").and_then(Value::as_bool) == Some(true)
                && get(c, "state.running").is_some()
            {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" {
            if has_running && condition_true(pod, "Ready") {
                reason = "Running".into();
            } else if !error_reason.is_empty() {
                reason = error_reason;
            } else if has_running {
                reason = "NotReady".into();
            }
        }
    }
    if get(pod, "metadata.deletionTimestamp").is_some() {
        if status_reason == "NodeLost" {
            reason = "Unknown".into();
        } else if phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".into();
        }
    }
    PodSummary {
        ready,
        total,
        reason,
        restarts,
        last_restart,
    }
}

pub(crate) fn pod_ready(pod: &Value) -> String {
    let s = summarize_pod(pod);
    format!("{}/{}", s.ready, s.total)
}

pub(crate) fn pod_restarts(pod: &Value, now: SystemTime) -> String {
    let s = summarize_pod(pod);
    match s.last_restart {
        Some(t) if s.restarts != 0 => format!(
            "{} ({} ago)",
            s.restarts,
            human_duration(now.duration_since(t).unwrap_or_default())
        ),
        _ => s.restarts.to_string(),
    }
}

/// Upstream's `printPod` STATUS.
pub(crate) fn pod_status(pod: &Value) -> String {
    summarize_pod(pod).reason
}

/// `printPod`'s READINESS GATES: gates whose condition (the first of that type) is true, over the
/// gates; `<none>` without gates.
pub(crate) fn pod_readiness_gates(pod: &Value) -> String {
    let gates = list(pod, "spec.readinessGates");
    if gates.is_empty() {
        return "<none>".into();
    }
    let conditions = list(pod, "status.conditions");
    let ready = gates
        .iter()
        .filter(|g| {
            conditions
                .iter()
                .find(|c| str_at(c, "type") == str_at(g, "conditionType"))
                .is_some_and(|c| str_at(c, "status") == "True")
        })
        .count();
    format!("{ready}/{}", gates.len())
}

pub(crate) fn node_status(node: &Value) -> String {
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

/// `findNodeRoles`: `node-role.kubernetes.io/<role>` labels and the `kubernetes.io/role` label's
/// value, sorted; `<none>` without any.
pub(crate) fn node_roles(node: &Value) -> String {
    let mut roles = BTreeSet::new();
    if let Some(labels) = get(node, "metadata.labels").and_then(Value::as_object) {
        for (k, v) in labels {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                if !role.is_empty() {
                    roles.insert(role.to_owned());
                }
            } else if k == "kubernetes.io/role"
                && let Some(v) = v.as_str().filter(|v| !v.is_empty())
            {
                roles.insert(v.to_owned());
            }
        }
    }
    if roles.is_empty() {
        return "<none>".into();
    }
    roles.into_iter().collect::<Vec<_>>().join(",")
}

/// `getNodeInternalIP` / `getNodeExternalIP`: the first address of that type, or `<none>`.
pub(crate) fn node_address(node: &Value, kind: &str) -> String {
    list(node, "status.addresses")
        .iter()
        .find(|a| str_at(a, "type") == kind)
        .map_or_else(|| "<none>".to_owned(), |a| str_at(a, "address").to_owned())
}

// ---- workloads ----

/// `layoutContainerCells`: the containers' names (or images) joined with `,`.
pub(crate) fn containers(list: &[Value], field: &str) -> String {
    list.iter()
        .map(|c| str_at(c, field))
        .collect::<Vec<_>>()
        .join(",")
}

/// `labels.FormatLabels`: `k=v` pairs sorted by key, or `<none>` for none.
pub(crate) fn format_labels(map: Option<&Value>) -> String {
    let pairs: Vec<String> = map
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    if pairs.is_empty() {
        "<none>".into()
    } else {
        pairs.join(",")
    }
}

/// `metav1.LabelSelectorAsSelector(s).String()`: requirements sorted by key, `k=v`,
/// `k in (a,b)`, `k notin (a,b)`, `k`, `!k`; empty for no selector or an empty one;
/// `Err` for an operator it does not know.
pub(crate) fn label_selector(sel: Option<&Value>) -> Result<String, ()> {
    let Some(sel) = sel else {
        return Ok(String::new());
    };
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in m {
            reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or_default())));
        }
    }
    for e in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
    {
        let key = str_at(e, "key");
        let mut values: Vec<&str> = list(e, "values").iter().filter_map(Value::as_str).collect();
        values.sort_unstable();
        let text = match str_at(e, "operator") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            _ => return Err(()),
        };
        reqs.push((key.to_owned(), text));
    }
    reqs.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(reqs
        .into_iter()
        .map(|(_, t)| t)
        .collect::<Vec<_>>()
        .join(","))
}

/// `ready/desired` as the Deployment and StatefulSet printers show it.
pub(crate) fn ready_replicas(obj: &Value) -> String {
    format!(
        "{}/{}",
        int_at(obj, "status.readyReplicas"),
        int_at(obj, "spec.replicas")
    )
}

/// `printJob`'s STATUS: the first true condition of Complete, Failed, (deletion: Terminating),
/// Suspended, FailureTarget, SuccessCriteriaMet; else Running.
pub(crate) fn job_status(job: &Value) -> String {
    let has = |t: &str| {
        list(job, "status.conditions")
            .iter()
            .find(|c| str_at(c, "type") == t)
            .is_some_and(|c| str_at(c, "status") == "True")
    };
    if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if get(job, "metadata.deletionTimestamp").is_some() {
        "Terminating"
    } else if has("Suspended") {
        "Suspended"
    } else if has("FailureTarget") {
        "FailureTarget"
    } else if has("SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    }
    .into()
}

/// `printJob`'s COMPLETIONS: `succeeded/completions`, or `succeeded/1 of parallelism`.
pub(crate) fn job_completions(job: &Value) -> String {
    let succeeded = int_at(job, "status.succeeded");
    match get(job, "spec.completions").and_then(Value::as_i64) {
        Some(c) => format!("{succeeded}/{c}"),
        None => match int_at(job, "spec.parallelism") {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    }
}

/// `printJob`'s DURATION: from start to completion, or to now while running; empty before start.
pub(crate) fn job_duration(job: &Value, now: SystemTime) -> String {
    let Some(start) = get(job, "status.startTime")
        .and_then(Value::as_str)
        .and_then(parse_timestamp)
    else {
        return String::new();
    };
    let end = get(job, "status.completionTime")
        .and_then(Value::as_str)
        .and_then(parse_timestamp)
        .unwrap_or(now);
    human_duration(end.duration_since(start).unwrap_or_default())
}

/// `formatHPAMetrics`: each metric's `current/target`, at most two, then `+ N more...`.
pub(crate) fn hpa_targets(hpa: &Value) -> String {
    let specs = list(hpa, "spec.metrics");
    if specs.is_empty() {
        return "<none>".into();
    }
    let statuses = list(hpa, "status.currentMetrics");
    let q = |v: Option<&Value>| v.map(text_of).unwrap_or_else(|| "0".into());
    let mut out = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let status = statuses.get(i);
        // The status of the same source type, as upstream's `statuses[i].X != nil`.
        let st = |field: &str| status.and_then(|s| get(s, field));
        let text = match str_at(spec, "type") {
            kind @ ("External" | "Object") => {
                let field = if kind == "External" {
                    "external"
                } else {
                    "object"
                };
                let target = get(spec, &format!("{field}.target"));
                if let Some(avg) = target.and_then(|t| get(t, "averageValue")) {
                    let current = st(&format!("{field}.current.averageValue"))
                        .map_or_else(|| "<unknown>".into(), text_of);
                    format!("{current}/{} (avg)", text_of(avg))
                } else {
                    let current = if st(field).is_some() {
                        q(st(&format!("{field}.current.value")))
                    } else {
                        "<unknown>".into()
                    };
                    format!("{current}/{}", q(target.and_then(|t| get(t, "value"))))
                }
            }
            "Pods" => {
                let current = if st("pods").is_some() {
                    q(st("pods.current.averageValue"))
                } else {
                    "<unknown>".into()
                };
                format!("{current}/{}", q(get(spec, "pods.target.averageValue")))
            }
            kind @ ("Resource" | "ContainerResource") => {
                let field = if kind == "Resource" {
                    "resource"
                } else {
                    "containerResource"
                };
                let name = str_at(spec, &format!("{field}.name"));
                let target = get(spec, &format!("{field}.target"));
                if let Some(avg) = target.and_then(|t| get(t, "averageValue")) {
                    let current = if st(field).is_some() {
                        q(st(&format!("{field}.current.averageValue")))
                    } else {
                        "<unknown>".into()
                    };
                    format!("{name}: {current}/{}", text_of(avg))
                } else {
                    let current = st(&format!("{field}.current.averageUtilization"))
                        .map_or_else(|| "<unknown>".into(), |u| format!("{}%", text_of(u)));
                    let target = target
                        .and_then(|t| get(t, "averageUtilization"))
                        .map_or_else(|| "<auto>".into(), |u| format!("{}%", text_of(u)));
                    format!("{name}: {current}/{target}")
                }
            }
            _ => "<unknown type>".into(),
        };
        out.push(text);
    }
    let count = out.len();
    if count > 2 {
        out.truncate(2);
        return format!("{} + {} more...", out.join(", "), count - 2);
    }
    out.join(", ")
}

/// `metav1.GetControllerOf` formatted as `printControllerRevision` does: `kind.group/name` in
/// lowercase, or `<none>`.
pub(crate) fn controller_of(obj: &Value) -> String {
    let Some(r) = list(obj, "metadata.ownerReferences")
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
    else {
        return "<none>".into();
    };
    let group = str_at(r, "apiVersion")
        .rsplit_once('/')
        .map_or("", |(g, _)| g);
    let kind = str_at(r, "kind");
    let name = str_at(r, "name");
    if kind.is_empty() && group.is_empty() {
        return name.to_owned();
    }
    let gk = if group.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}.{group}")
    };
    format!("{}/{name}", gk.to_lowercase())
}

// ---- services and networking ----

/// A service's EXTERNAL-IP (`getServiceExternalIP`, wide).
pub(crate) fn service_external_ip(svc: &Value) -> String {
    let external: Vec<&str> = list(svc, "spec.externalIPs")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    match str_at(svc, "spec.type") {
        "ClusterIP" | "NodePort" => {
            if external.is_empty() {
                "<none>".into()
            } else {
                external.join(",")
            }
        }
        "LoadBalancer" => {
            let lb = load_balancer_ingress(svc);
            if !external.is_empty() {
                let mut all: Vec<&str> = if lb.is_empty() {
                    Vec::new()
                } else {
                    lb.split(',').collect()
                };
                all.extend(external);
                all.join(",")
            } else if !lb.is_empty() {
                lb
            } else {
                "<pending>".into()
            }
        }
        "ExternalName" => str_at(svc, "spec.externalName").to_owned(),
        _ => "<unknown>".into(),
    }
}

/// `loadBalancerStatusStringer` (wide: not clipped): the ingress IPs, else hostnames, sorted
/// and without duplicates.
pub(crate) fn load_balancer_ingress(obj: &Value) -> String {
    let set: BTreeSet<&str> = list(obj, "status.loadBalancer.ingress")
        .iter()
        .filter_map(|i| {
            let ip = str_at(i, "ip");
            let host = str_at(i, "hostname");
            (!ip.is_empty())
                .then_some(ip)
                .or((!host.is_empty()).then_some(host))
        })
        .collect();
    set.into_iter().collect::<Vec<_>>().join(",")
}

/// `makePortString`: `port/protocol` or `port:nodePort/protocol`, or `<none>`.
pub(crate) fn service_ports(svc: &Value) -> String {
    let ports: Vec<String> = list(svc, "spec.ports")
        .iter()
        .map(|p| {
            let port = int_at(p, "port");
            let proto = str_at(p, "protocol");
            match int_at(p, "nodePort") {
                n if n > 0 => format!("{port}:{n}/{proto}"),
                _ => format!("{port}/{proto}"),
            }
        })
        .collect();
    if ports.is_empty() {
        "<none>".into()
    } else {
        ports.join(",")
    }
}

fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `formatEndpoints` (all ports): at most three `ip:port`, then `+ N more...`; `<none>` without
/// subsets.
pub(crate) fn endpoints(ep: &Value) -> String {
    let subsets = list(ep, "subsets");
    if subsets.is_empty() {
        return "<none>".into();
    }
    const MAX: usize = 3;
    let (mut out, mut more, mut count) = (Vec::new(), false, 0);
    for ss in subsets {
        let addresses = list(ss, "addresses");
        let ports = list(ss, "ports");
        if ports.is_empty() {
            count += addresses.len();
            for a in addresses {
                if out.len() == MAX {
                    more = true;
                    break;
                }
                out.push(str_at(a, "ip").to_owned());
            }
            continue;
        }
        for p in ports {
            count += addresses.len();
            for a in addresses {
                if out.len() == MAX {
                    more = true;
                    break;
                }
                out.push(join_host_port(str_at(a, "ip"), int_at(p, "port")));
            }
        }
    }
    let ret = out.join(",");
    if more {
        format!("{ret} + {} more...", count - MAX)
    } else {
        ret
    }
}

/// `listWithMoreString`: at most three, then `+ N more...`; `<unset>` for none.
fn list_with_more(items: impl Iterator<Item = String>) -> String {
    const MAX: usize = 3;
    let (mut out, mut count) = (Vec::new(), 0);
    for i in items {
        if out.len() < MAX {
            out.push(i);
        }
        count += 1;
    }
    let ret = out.join(",");
    if count > MAX {
        format!("{ret} + {} more...", count - MAX)
    } else if ret.is_empty() {
        "<unset>".into()
    } else {
        ret
    }
}

/// `formatDiscoveryPorts`.
pub(crate) fn endpoint_slice_ports(slice: &Value) -> String {
    list_with_more(list(slice, "ports").iter().map(|p| {
        match (get(p, "port"), get(p, "name").and_then(Value::as_str)) {
            (Some(port), _) => text_of(port),
            (None, Some(name)) => name.to_owned(),
            (None, None) => "*".to_owned(),
        }
    }))
}

/// `formatDiscoveryEndpoints`.
pub(crate) fn endpoint_slice_endpoints(slice: &Value) -> String {
    list_with_more(
        list(slice, "endpoints")
            .iter()
            .flat_map(|e| list(e, "addresses"))
            .map(|a| a.as_str().unwrap_or_default().to_owned()),
    )
}

/// `formatHosts`: up to three rule hosts, then `+ N more...`; `*` for none.
pub(crate) fn ingress_hosts(ing: &Value) -> String {
    const MAX: usize = 3;
    let rules = list(ing, "spec.rules");
    let mut hosts = Vec::new();
    let mut more = false;
    for r in rules {
        if hosts.len() == MAX {
            more = true;
        }
        let h = str_at(r, "host");
        if !more && !h.is_empty() {
            hosts.push(h);
        }
    }
    if hosts.is_empty() {
        return "*".into();
    }
    let ret = hosts.join(",");
    if more {
        format!("{ret} + {} more...", rules.len() - MAX)
    } else {
        ret
    }
}

/// `printIngressClass`'s PARAMETERS: `Kind[.group]/name`, or `<none>`.
pub(crate) fn ingress_class_parameters(ic: &Value) -> String {
    let Some(p) = get(ic, "spec.parameters") else {
        return "<none>".into();
    };
    let mut s = str_at(p, "kind").to_owned();
    if let Some(g) = get(p, "apiGroup").and_then(Value::as_str) {
        s.push('.');
        s.push_str(g);
    }
    format!("{s}/{}", str_at(p, "name"))
}

/// `printIPAddress`'s PARENTREF: `resource[.group][/namespace]/name` in lowercase, or `<none>`.
pub(crate) fn ip_address_parent_ref(ip: &Value) -> String {
    let Some(p) = get(ip, "spec.parentRef") else {
        return "<none>".into();
    };
    let (group, resource) = (str_at(p, "group"), str_at(p, "resource"));
    let mut s = if group.is_empty() {
        resource.to_lowercase()
    } else {
        format!("{resource}.{group}").to_lowercase()
    };
    let ns = str_at(p, "namespace");
    if !ns.is_empty() {
        s.push('/');
        s.push_str(ns);
    }
    format!("{s}/{}", str_at(p, "name"))
}

// ---- events (core v1 and events.k8s.io/v1) ----

/// The first present field among the names the two event versions use.
fn event_field<'a>(ev: &'a Value, core: &str, events: &str) -> Option<&'a Value> {
    get(ev, core).or_else(|| get(ev, events))
}

fn event_str<'a>(ev: &'a Value, core: &str, events: &str) -> &'a str {
    event_field(ev, core, events)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

pub(crate) fn event_first_seen(ev: &Value, now: SystemTime) -> String {
    match event_field(ev, "firstTimestamp", "deprecatedFirstTimestamp").and_then(Value::as_str) {
        Some(t) => since(Some(t), now),
        None => since(get(ev, "eventTime").and_then(Value::as_str), now),
    }
}

pub(crate) fn event_last_seen(ev: &Value, now: SystemTime) -> String {
    if get(ev, "series").is_some() {
        return since(
            get(ev, "series.lastObservedTime").and_then(Value::as_str),
            now,
        );
    }
    match event_field(ev, "lastTimestamp", "deprecatedLastTimestamp").and_then(Value::as_str) {
        Some(t) => since(Some(t), now),
        None => event_first_seen(ev, now),
    }
}

pub(crate) fn event_count(ev: &Value) -> i64 {
    if get(ev, "series").is_some() {
        return int_at(ev, "series.count");
    }
    match event_field(ev, "count", "deprecatedCount").and_then(Value::as_i64) {
        Some(c) if c != 0 => c,
        // Singleton events have no count in the new API.
        _ => 1,
    }
}

pub(crate) fn event_object(ev: &Value) -> String {
    let r = event_field(ev, "involvedObject", "regarding").unwrap_or(&Value::Null);
    let kind = str_at(r, "kind").to_lowercase();
    match str_at(r, "name") {
        "" => kind,
        name => format!("{kind}/{name}"),
    }
}

pub(crate) fn event_subobject(ev: &Value) -> String {
    let r = event_field(ev, "involvedObject", "regarding").unwrap_or(&Value::Null);
    str_at(r, "fieldPath").to_owned()
}

pub(crate) fn event_source(ev: &Value) -> String {
    let src = event_field(ev, "source", "deprecatedSource").unwrap_or(&Value::Null);
    let component = first_non_empty(
        str_at(src, "component"),
        event_str(ev, "reportingComponent", "reportingController"),
    );
    let instance = first_non_empty(str_at(src, "host"), str_at(ev, "reportingInstance"));
    if instance.is_empty() {
        component.to_owned()
    } else {
        format!("{component}, {instance}")
    }
}

pub(crate) fn event_message(ev: &Value) -> String {
    event_str(ev, "message", "note").trim().to_owned()
}

// ---- storage ----

/// `GetAccessModesAsString`: RWO, ROX, RWX, RWOP, in that order, each once.
pub(crate) fn access_modes(modes: &[Value]) -> String {
    let has = |m: &str| modes.iter().any(|v| v.as_str() == Some(m));
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(m, _)| has(m))
    .map(|(_, s)| *s)
    .collect::<Vec<_>>()
    .join(",")
}

fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    get(obj, "metadata.annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

/// The phase, or `Terminating` once deletion started (PVs and PVCs).
pub(crate) fn volume_phase(obj: &Value) -> String {
    if get(obj, "metadata.deletionTimestamp").is_some() {
        "Terminating".into()
    } else {
        str_at(obj, "status.phase").to_owned()
    }
}

/// `GetPersistentVolumeClass` / `GetPersistentVolumeClaimClass`: the beta annotation first.
pub(crate) fn volume_class(obj: &Value) -> String {
    annotation(obj, BETA_STORAGE_CLASS)
        .unwrap_or_else(|| str_at(obj, "spec.storageClassName"))
        .to_owned()
}

pub(crate) fn pv_claim(pv: &Value) -> String {
    match get(pv, "spec.claimRef") {
        Some(r) => format!("{}/{}", str_at(r, "namespace"), str_at(r, "name")),
        None => String::new(),
    }
}

/// A PVC's CAPACITY: its bound capacity once it names a volume, else empty.
pub(crate) fn pvc_capacity(pvc: &Value) -> String {
    if str_at(pvc, "spec.volumeName").is_empty() {
        return String::new();
    }
    get(pvc, "status.capacity.storage").map_or_else(|| "0".into(), text_of)
}

/// A PVC's ACCESS MODES: its bound modes once it names a volume, else empty.
pub(crate) fn pvc_access_modes(pvc: &Value) -> String {
    if str_at(pvc, "spec.volumeName").is_empty() {
        return String::new();
    }
    access_modes(list(pvc, "status.accessModes"))
}

/// A StorageClass's NAME, with ` (default)` for the default class.
pub(crate) fn storage_class_name(sc: &Value) -> String {
    let name = str_at(sc, "metadata.name");
    let default = [
        "storageclass.kubernetes.io/is-default-class",
        "storageclass.beta.kubernetes.io/is-default-class",
    ]
    .iter()
    .any(|k| annotation(sc, k) == Some("true"));
    if default {
        format!("{name} (default)")
    } else {
        name.to_owned()
    }
}

/// `printCSIDriver`'s TOKENREQUESTS: the audiences, or `<unset>`.
pub(crate) fn csi_token_requests(d: &Value) -> String {
    match get(d, "spec.tokenRequests").and_then(Value::as_array) {
        Some(t) => t
            .iter()
            .map(|r| str_at(r, "audience"))
            .collect::<Vec<_>>()
            .join(","),
        None => "<unset>".into(),
    }
}

// ---- RBAC, certificates, admission, quota, flow control, DRA, aggregation ----

/// `rbac.SubjectsStrings`, one kind of subject joined with `, `.
pub(crate) fn subjects(binding: &Value, kind: &str) -> String {
    list(binding, "subjects")
        .iter()
        .filter(|s| str_at(s, "kind") == kind)
        .map(|s| {
            if kind == "ServiceAccount" {
                format!("{}/{}", str_at(s, "namespace"), str_at(s, "name"))
            } else {
                str_at(s, "name").to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `extractCSRStatus`: Denied, Approved or Pending, then `,Failed` and `,Issued`.
pub(crate) fn csr_condition(csr: &Value) -> String {
    let has = |t: &str| {
        list(csr, "status.conditions")
            .iter()
            .any(|c| str_at(c, "type") == t)
    };
    let mut s = if has("Denied") {
        "Denied"
    } else if has("Approved") {
        "Approved"
    } else {
        "Pending"
    }
    .to_owned();
    if has("Failed") {
        s.push_str(",Failed");
    }
    if !str_at(csr, "status.certificate").is_empty() {
        s.push_str(",Issued");
    }
    s
}

pub(crate) fn csr_requested_duration(csr: &Value) -> String {
    match get(csr, "spec.expirationSeconds").and_then(Value::as_i64) {
        Some(s) => human_duration(Duration::from_secs(u64::try_from(s).unwrap_or(0))),
        None => "<none>".into(),
    }
}

/// `printValidatingAdmissionPolicy`'s PARAMKIND: `apiVersion/kind`, or `<unset>`.
pub(crate) fn param_kind(vap: &Value) -> String {
    match get(vap, "spec.paramKind") {
        Some(p) => format!("{}/{}", str_at(p, "apiVersion"), str_at(p, "kind")),
        None => "<unset>".into(),
    }
}

/// `printValidatingAdmissionPolicyBinding`'s PARAMREF.
pub(crate) fn param_ref(b: &Value) -> String {
    let Some(p) = get(b, "spec.paramRef") else {
        return "<unset>".into();
    };
    let (name, ns) = (str_at(p, "name"), str_at(p, "namespace"));
    if !name.is_empty() {
        if ns.is_empty() {
            format!("*/{name}")
        } else {
            format!("{ns}/{name}")
        }
    } else if let Some(sel) = get(p, "selector") {
        gogo_label_selector(sel)
    } else {
        "<unset>".into()
    }
}

/// A `LabelSelector` as its generated (gogo) `String()` prints it, which is what upstream's
/// PARAMREF shows for a selector: `&LabelSelector{MatchLabels:map[string]string{k: v,},...}`.
fn gogo_label_selector(sel: &Value) -> String {
    let mut labels: Vec<(&String, &Value)> = sel
        .get("matchLabels")
        .and_then(Value::as_object)
        .map(|m| m.iter().collect())
        .unwrap_or_default();
    labels.sort_by(|a, b| a.0.cmp(b.0));
    let mut s = String::from("&LabelSelector{MatchLabels:map[string]string{");
    for (k, v) in labels {
        s.push_str(&format!("{k}: {},", v.as_str().unwrap_or_default()));
    }
    s.push_str("},MatchExpressions:[]LabelSelectorRequirement{");
    for e in list(sel, "matchExpressions") {
        let values: Vec<&str> = list(e, "values").iter().filter_map(Value::as_str).collect();
        s.push_str(&format!(
            "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
            str_at(e, "key"),
            str_at(e, "operator"),
            values.join(" ")
        ));
    }
    s.push_str("},}");
    s
}

/// `printResourceQuota`'s REQUEST (`limits` false) or LIMIT column: `name: used/hard` for each
/// resource of `status.hard`, sorted, split on the `limits.` prefix.
pub(crate) fn resource_quota(rq: &Value, limits: bool) -> String {
    let Some(hard) = get(rq, "status.hard").and_then(Value::as_object) else {
        return String::new();
    };
    let mut names: Vec<&String> = hard.keys().collect();
    names.sort();
    names
        .into_iter()
        .filter(|n| {
            let mut pieces = n.split('.');
            let is_limit = pieces.next() == Some("limits") && pieces.next().is_some();
            is_limit == limits
        })
        .map(|n| {
            let used = get(rq, "status.used")
                .and_then(|u| u.get(n.as_str()))
                .map_or_else(|| "0".into(), text_of);
            format!("{n}: {used}/{}", text_of(&hard[n.as_str()]))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `printFlowSchema`'s MISSINGPL: the Dangling condition's status, or `?`.
pub(crate) fn flow_schema_dangling(fs: &Value) -> String {
    list(fs, "status.conditions")
        .iter()
        .find(|c| str_at(c, "type") == "Dangling")
        .map_or_else(|| "?".into(), |c| str_at(c, "status").to_owned())
}

/// `resourceClaimState`: deleted, pending, allocated, reserved.
pub(crate) fn resource_claim_state(claim: &Value) -> String {
    let deleted = get(claim, "metadata.deletionTimestamp").is_some();
    let mut states = Vec::new();
    if deleted {
        states.push("deleted");
    }
    if get(claim, "status.allocation").is_none() {
        if !deleted {
            states.push("pending");
        }
    } else {
        states.push("allocated");
        if !list(claim, "status.reservedFor").is_empty() {
            states.push("reserved");
        }
    }
    states.join(",")
}

/// kube-aggregator's SERVICE: `namespace/name`, or `Local`.
pub(crate) fn api_service_service(s: &Value) -> String {
    match get(s, "spec.service") {
        Some(svc) => format!("{}/{}", str_at(svc, "namespace"), str_at(svc, "name")),
        None => "Local".into(),
    }
}

/// kube-aggregator's AVAILABLE: the Available condition's status, with its reason when not True.
pub(crate) fn api_service_available(s: &Value) -> String {
    match list(s, "status.conditions")
        .iter()
        .find(|c| str_at(c, "type") == "Available")
    {
        None => "Unknown".into(),
        Some(c) => {
            let status = str_at(c, "status");
            let reason = str_at(c, "reason");
            if status != "True" && !reason.is_empty() {
                format!("{status} ({reason})")
            } else {
                status.to_owned()
            }
        }
    }
}

/// `kind/name` of a reference (a RoleBinding's roleRef, an HPA's scaleTargetRef).
pub(crate) fn kind_name(r: &Value) -> String {
    format!("{}/{}", str_at(r, "kind"), str_at(r, "name"))
}

/// The size of a ConfigMap: `data` and `binaryData` entries together.
pub(crate) fn config_map_data(cm: &Value) -> Value {
    let n = |f: &str| get(cm, f).and_then(Value::as_object).map_or(0, |m| m.len());
    json!(n("data") + n("binaryData"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_timestamps_read_as_kubectl_does() {
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
        let micro = parse_timestamp("2026-11-23T03:49:22.250000Z").unwrap();
        assert_eq!(micro.duration_since(t).unwrap(), Duration::from_millis(250));
        for bad in [
            "2026-13-01T00:00:00Z",
            "yesterday",
            "2026-11-23T03:49:22.Z",
            "2026-11-23T03:49:22xZ",
        ] {
            assert!(parse_timestamp(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn pod_and_node_cells() {
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
        let scheduling_gated = json!({"status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}});
        assert_eq!(pod_status(&scheduling_gated), "SchedulingGated");
        // A container still being created is not ready, whatever its `ready` says; a started
        // sidecar counts among the containers and, ready, as ready.
        let creating = json!({
            "spec": {"initContainers": [{"name": "s", "restartPolicy": "Always"}],
                     "containers": [{"name": "a"}]},
            "status": {"phase": "Pending",
                "initContainerStatuses": [{"name": "s", "ready": true, "started": true,
                    "state": {"running": {}}}],
                "containerStatuses": [{"name": "a", "ready": true,
                    "state": {"waiting": {"reason": "ContainerCreating"}}}]}
        });
        assert_eq!(pod_ready(&creating), "1/2");
        assert_eq!(pod_status(&creating), "ContainerCreating");
        // A finished pod being deleted keeps its phase's reason.
        let gone = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"phase": "Succeeded"}});
        assert_eq!(pod_status(&gone), "Succeeded");
        let gated = json!({"spec": {"readinessGates": [{"conditionType": "a"}, {"conditionType": "b"}]},
            "status": {"conditions": [{"type": "a", "status": "True"}, {"type": "b", "status": "False"}]}});
        assert_eq!(pod_readiness_gates(&gated), "1/2");
        assert_eq!(pod_readiness_gates(&pod), "<none>");
        let node = json!({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": "",
                "kubernetes.io/role": "edge", "node-role.kubernetes.io/": "x"}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                "addresses": [{"type": "Hostname", "address": "n"}, {"type": "InternalIP", "address": "10.0.0.1"}]}});
        assert_eq!(node_status(&node), "Ready,SchedulingDisabled");
        assert_eq!(node_roles(&node), "control-plane,edge");
        assert_eq!(node_address(&node, "InternalIP"), "10.0.0.1");
        assert_eq!(node_address(&node, "ExternalIP"), "<none>");
        assert_eq!(node_roles(&json!({})), "<none>");
    }

    #[test]
    fn selectors_and_labels_format_as_upstream() {
        assert_eq!(format_labels(Some(&json!({"b": "2", "a": "1"}))), "a=1,b=2");
        assert_eq!(format_labels(None), "<none>");
        let sel = json!({"matchLabels": {"z": "1", "app": "web"}, "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["b", "a"]},
            {"key": "gone", "operator": "DoesNotExist"},
            {"key": "env", "operator": "NotIn", "values": ["prod"]},
            {"key": "has", "operator": "Exists"}]});
        assert_eq!(
            label_selector(Some(&sel)).unwrap(),
            "app=web,env notin (prod),!gone,has,tier in (a,b),z=1"
        );
        assert_eq!(label_selector(Some(&json!({}))).unwrap(), "");
        assert_eq!(label_selector(None).unwrap(), "");
        assert!(
            label_selector(Some(
                &json!({"matchExpressions": [{"key": "a", "operator": "Near"}]})
            ))
            .is_err()
        );
    }

    #[test]
    fn workload_cells() {
        let job = json!({"spec": {"parallelism": 3},
            "status": {"succeeded": 1, "startTime": "2026-01-01T00:00:00Z",
                "completionTime": "2026-01-01T00:02:05Z",
                "conditions": [{"type": "Complete", "status": "True"}]}});
        assert_eq!(job_completions(&job), "1/1 of 3");
        assert_eq!(job_status(&job), "Complete");
        assert_eq!(job_duration(&job, SystemTime::now()), "2m5s");
        let suspended = json!({"spec": {"completions": 3},
            "status": {"conditions": [{"type": "Complete", "status": "False"},
                {"type": "Suspended", "status": "True"}]}});
        assert_eq!(job_completions(&suspended), "0/3");
        assert_eq!(job_status(&suspended), "Suspended");
        assert_eq!(job_duration(&suspended, SystemTime::now()), "");
        assert_eq!(
            ready_replicas(&json!({"spec": {"replicas": 2}, "status": {}})),
            "0/2"
        );
        let owned = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "controller": true}]}});
        assert_eq!(controller_of(&owned), "statefulset.apps/db");
        assert_eq!(controller_of(&json!({})), "<none>");
        let hpa = json!({"spec": {"metrics": [
            {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}},
            {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "1k"}}},
            {"type": "External", "external": {"metric": {"name": "q"}, "target": {"type": "Value", "value": "10"}}}]},
            "status": {"currentMetrics": [
                {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 12}}}]}});
        assert_eq!(hpa_targets(&hpa), "cpu: 12%/60%, <unknown>/1k + 1 more...");
        assert_eq!(hpa_targets(&json!({"spec": {}})), "<none>");
    }

    #[test]
    fn service_and_network_cells() {
        let svc = json!({"spec": {"type": "LoadBalancer", "externalIPs": ["1.2.3.4"],
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}, {"port": 53, "protocol": "UDP"}]},
            "status": {"loadBalancer": {"ingress": [{"hostname": "b.example"}, {"ip": "9.9.9.9"}]}}});
        assert_eq!(service_external_ip(&svc), "9.9.9.9,b.example,1.2.3.4");
        assert_eq!(service_ports(&svc), "80:30080/TCP,53/UDP");
        let pending = json!({"spec": {"type": "LoadBalancer"}});
        assert_eq!(service_external_ip(&pending), "<pending>");
        assert_eq!(service_ports(&pending), "<none>");
        let ep = json!({"subsets": [{"addresses": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}],
            "ports": [{"port": 80}, {"port": 443}]}]});
        assert_eq!(
            endpoints(&ep),
            "10.0.0.1:80,[fd00::1]:80,10.0.0.1:443 + 1 more..."
        );
        assert_eq!(endpoints(&json!({})), "<none>");
        let slice = json!({"ports": [{"port": 80}, {"name": "x"}, {}],
            "endpoints": [{"addresses": ["a", "b"]}, {"addresses": ["c", "d", "e"]}]});
        assert_eq!(endpoint_slice_ports(&slice), "80,x,*");
        assert_eq!(endpoint_slice_endpoints(&slice), "a,b,c + 2 more...");
        assert_eq!(endpoint_slice_ports(&json!({})), "<unset>");
        let ing = json!({"spec": {"rules": [{"host": "a"}, {}, {"host": "c"}, {"host": "d"}, {"host": "e"}]}});
        assert_eq!(ingress_hosts(&ing), "a,c,d + 2 more...");
        assert_eq!(ingress_hosts(&json!({})), "*");
        let ip = json!({"spec": {"parentRef": {"group": "", "resource": "services", "namespace": "default", "name": "kubernetes"}}});
        assert_eq!(ip_address_parent_ref(&ip), "services/default/kubernetes");
        let ic =
            json!({"spec": {"parameters": {"kind": "Params", "apiGroup": "x.io", "name": "p"}}});
        assert_eq!(ingress_class_parameters(&ic), "Params.x.io/p");
    }

    #[test]
    fn event_cells_read_both_versions() {
        let now = parse_timestamp("2026-01-01T01:00:00Z").unwrap();
        let core = json!({"involvedObject": {"kind": "Pod", "name": "p", "fieldPath": "spec.containers{c}"},
            "source": {"component": "kubelet", "host": "n1"}, "message": " hi \n",
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:30:00Z", "count": 4});
        assert_eq!(event_object(&core), "pod/p");
        assert_eq!(event_subobject(&core), "spec.containers{c}");
        assert_eq!(event_source(&core), "kubelet, n1");
        assert_eq!(event_message(&core), "hi");
        assert_eq!(event_first_seen(&core, now), "60m");
        assert_eq!(event_last_seen(&core, now), "30m");
        assert_eq!(event_count(&core), 4);
        let new = json!({"regarding": {"kind": "Node", "name": ""}, "note": "n",
            "eventTime": "2026-01-01T00:59:00.000000Z", "reportingController": "ctl",
            "reportingInstance": "i", "series": {"count": 7, "lastObservedTime": "2026-01-01T00:59:30.000000Z"}});
        assert_eq!(event_object(&new), "node");
        assert_eq!(event_source(&new), "ctl, i");
        assert_eq!(event_message(&new), "n");
        assert_eq!(event_first_seen(&new, now), "60s");
        assert_eq!(event_last_seen(&new, now), "30s");
        assert_eq!(event_count(&new), 7);
        assert_eq!(event_count(&json!({})), 1);
    }

    #[test]
    fn storage_rbac_and_other_cells() {
        let modes = [
            json!("ReadWriteOncePod"),
            json!("ReadWriteOnce"),
            json!("ReadWriteOnce"),
        ];
        assert_eq!(access_modes(&modes), "RWO,RWOP");
        let pvc = json!({"metadata": {"annotations": {BETA_STORAGE_CLASS: "old"}},
            "spec": {"storageClassName": "new", "volumeName": "pv"},
            "status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"]}});
        assert_eq!(volume_class(&pvc), "old");
        assert_eq!(pvc_capacity(&pvc), "0");
        assert_eq!(pvc_access_modes(&pvc), "RWO");
        assert_eq!(pvc_capacity(&json!({"spec": {}})), "");
        assert_eq!(
            volume_phase(&json!({"metadata": {"deletionTimestamp": "x"}})),
            "Terminating"
        );
        let sc = json!({"metadata": {"name": "std", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}});
        assert_eq!(storage_class_name(&sc), "std (default)");
        let rb = json!({"subjects": [{"kind": "User", "name": "a"}, {"kind": "User", "name": "b"},
            {"kind": "ServiceAccount", "name": "s", "namespace": "ns"}]});
        assert_eq!(subjects(&rb, "User"), "a, b");
        assert_eq!(subjects(&rb, "ServiceAccount"), "ns/s");
        assert_eq!(subjects(&rb, "Group"), "");
        let csr = json!({"spec": {"expirationSeconds": 3600},
            "status": {"conditions": [{"type": "Approved"}, {"type": "Failed"}], "certificate": "eA=="}});
        assert_eq!(csr_condition(&csr), "Approved,Failed,Issued");
        assert_eq!(csr_requested_duration(&csr), "60m");
        let rq = json!({"status": {"hard": {"pods": "10", "limits.cpu": "2", "requests.cpu": "1"},
            "used": {"pods": "3"}}});
        assert_eq!(resource_quota(&rq, false), "pods: 3/10, requests.cpu: 0/1");
        assert_eq!(resource_quota(&rq, true), "limits.cpu: 0/2");
        let claim = json!({"status": {"allocation": {}, "reservedFor": [{}]}});
        assert_eq!(resource_claim_state(&claim), "allocated,reserved");
        assert_eq!(resource_claim_state(&json!({})), "pending");
        let svc = json!({"status": {"conditions": [{"type": "Available", "status": "False", "reason": "MissingEndpoints"}]}});
        assert_eq!(api_service_available(&svc), "False (MissingEndpoints)");
        assert_eq!(api_service_service(&svc), "Local");
        let b = json!({"spec": {"paramRef": {"selector": {"matchLabels": {"a": "b"}}}}});
        assert_eq!(
            param_ref(&b),
            "&LabelSelector{MatchLabels:map[string]string{a: b,},MatchExpressions:[]LabelSelectorRequirement{},}"
        );
        assert_eq!(
            config_map_data(&json!({"data": {"a": "1"}, "binaryData": {"b": ""}})),
            json!(2)
        );
    }
}
