//! The server's own account of where a pod event's time went, read from its
//! `watchcache_dispatch_latency_seconds` histogram before and after the churn: from the event
//! entering the cache to every matching watcher's queue (`queued`), and to its frame written to
//! a connection (`written`). Against the client's figures this splits the delivery after etcd's
//! ack into etcd's watch delivery plus the server's part, and what the network and the load
//! tool's own reading add.
//!
//! Quantiles of a bucketed histogram are bucket bounds: "p99 ≤ 25 ms" says the 99th percentile
//! falls in the bucket ending at 25 ms.

use serde::Serialize;

/// The histogram's name in the server's exposition.
const METRIC: &str = "watchcache_dispatch_latency_seconds_bucket";

/// One stage's cumulative bucket counts, by upper bound in seconds (ascending; `+Inf` last).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Buckets(Vec<(f64, u64)>);

impl Buckets {
    /// The buckets of `resource`'s `stage` in a Prometheus text exposition (empty if absent).
    pub(crate) fn parse(text: &str, resource: &str, stage: &str) -> Buckets {
        let want_resource = format!("resource=\"{resource}\"");
        let want_stage = format!("stage=\"{stage}\"");
        let mut out: Vec<(f64, u64)> = text
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix(METRIC)?.strip_prefix('{')?;
                let (labels, value) = rest.split_once("} ")?;
                let mut le = None;
                let (mut r, mut s) = (false, false);
                for kv in labels.split(',') {
                    r |= kv == want_resource;
                    s |= kv == want_stage;
                    if let Some(v) = kv.strip_prefix("le=\"") {
                        let v = v.trim_end_matches('"');
                        le = Some(if v == "+Inf" {
                            f64::INFINITY
                        } else {
                            v.parse().ok()?
                        });
                    }
                }
                let count = value.trim().parse::<f64>().ok()? as u64;
                (r && s).then_some((le?, count))
            })
            .collect();
        out.sort_by(|a, b| a.0.total_cmp(&b.0));
        Buckets(out)
    }

    /// The observations made between `earlier` and `self` (same bounds).
    pub(crate) fn since(&self, earlier: &Buckets) -> Buckets {
        Buckets(
            self.0
                .iter()
                .map(|&(le, n)| {
                    let before = earlier
                        .0
                        .iter()
                        .find(|(l, _)| *l == le)
                        .map_or(0, |&(_, c)| c);
                    (le, n.saturating_sub(before))
                })
                .collect(),
        )
    }

    /// Observations counted.
    pub(crate) fn count(&self) -> u64 {
        self.0.last().map_or(0, |&(_, n)| n)
    }

    /// The upper bound, in milliseconds, of the bucket holding quantile `q` (0–1); `None` with
    /// no observations, infinite above the last finite bound.
    pub(crate) fn quantile_ms(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = (q * total as f64).ceil().max(1.0) as u64;
        self.0
            .iter()
            .find(|&&(_, n)| n >= rank)
            .map(|&(le, _)| le * 1000.0)
    }
}

/// One stage's figures over the churn.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Stage {
    /// Observations (revisions for `queued`, deliveries for `written`).
    pub count: u64,
    /// The bucket bound holding the median, ms.
    pub p50_le_ms: Option<f64>,
    /// The bucket bound holding the 99th percentile, ms.
    pub p99_le_ms: Option<f64>,
}

impl Stage {
    pub(crate) fn of(b: &Buckets) -> Stage {
        Stage {
            count: b.count(),
            p50_le_ms: b.quantile_ms(0.5),
            p99_le_ms: b.quantile_ms(0.99),
        }
    }
}

/// The pods' two stages over the churn.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Stages {
    pub queued: Stage,
    pub written: Stage,
}

impl Stages {
    /// The pods' stages between two scrapes.
    pub(crate) fn between(before: &str, after: &str) -> Stages {
        let stage = |name| {
            Stage::of(
                &Buckets::parse(after, "pods", name).since(&Buckets::parse(before, "pods", name)),
            )
        };
        Stages {
            queued: stage("queued"),
            written: stage("written"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "\
# TYPE watchcache_dispatch_latency_seconds histogram
watchcache_dispatch_latency_seconds_bucket{resource=\"pods\",stage=\"written\",le=\"0.001\"} 10
watchcache_dispatch_latency_seconds_bucket{resource=\"pods\",stage=\"written\",le=\"0.01\"} 10
watchcache_dispatch_latency_seconds_bucket{resource=\"pods\",stage=\"written\",le=\"+Inf\"} 10
watchcache_dispatch_latency_seconds_bucket{resource=\"nodes\",stage=\"written\",le=\"0.001\"} 7
";
    const AFTER: &str = "\
watchcache_dispatch_latency_seconds_bucket{resource=\"pods\",stage=\"written\",le=\"0.001\"} 100
watchcache_dispatch_latency_seconds_bucket{resource=\"pods\",stage=\"written\",le=\"0.01\"} 198
watchcache_dispatch_latency_seconds_bucket{resource=\"pods\",stage=\"written\",le=\"+Inf\"} 210
watchcache_dispatch_latency_seconds_bucket{resource=\"pods\",stage=\"queued\",le=\"0.001\"} 5
watchcache_dispatch_latency_seconds_bucket{resource=\"pods\",stage=\"queued\",le=\"+Inf\"} 5
";

    #[test]
    fn quantiles_are_the_bounds_of_the_buckets_between_two_scrapes() {
        let s = Stages::between(BEFORE, AFTER);
        assert_eq!(s.written.count, 200);
        // 90 of the 200 at or under 1 ms, 188 at or under 10 ms.
        assert_eq!(s.written.p50_le_ms, Some(10.0));
        assert_eq!(s.written.p99_le_ms, Some(f64::INFINITY));
        assert_eq!(s.queued.count, 5);
        assert_eq!(s.queued.p99_le_ms, Some(1.0));
    }

    #[test]
    fn no_observations_have_no_quantiles() {
        let s = Stages::between(AFTER, AFTER);
        assert_eq!(s.written.count, 0);
        assert_eq!(s.written.p99_le_ms, None);
        assert_eq!(Stages::between("", "").queued.p50_le_ms, None);
    }
}
