//! Checks what each watcher received against etcd's own history of the run.

use std::collections::HashSet;
use std::time::Duration;

use etcd_client::{Client, EventType, WatchOptions};

use super::load::Received;
use super::pods;

/// One change in etcd's history: revision, pod id, and the pod's node before and after.
#[derive(Debug, Clone, Copy)]
pub(super) struct HistoryEntry {
    pub rev: u64,
    pub id: u32,
    pub new_node: Option<usize>,
    pub old_node: Option<usize>,
}

/// etcd's history of the pods prefix in `(from, to]`, read with a direct watch.
pub(super) async fn history(
    client: &Client,
    from: u64,
    to: u64,
) -> Result<Vec<HistoryEntry>, String> {
    history_with(client, from, to, &pods::Codec::new()?).await
}

/// [`history`], the pods read with `codec` (JSON or protobuf).
pub(super) async fn history_with(
    client: &Client,
    from: u64,
    to: u64,
    codec: &pods::Codec,
) -> Result<Vec<HistoryEntry>, String> {
    let mut out = Vec::new();
    if to <= from {
        return Ok(out);
    }
    let mut wc = client
        .watch_client()
        .max_decoding_message_size(512 * 1024 * 1024);
    let opts = WatchOptions::new()
        .with_prefix()
        .with_prev_key()
        .with_start_revision(from as i64 + 1);
    let mut stream = wc
        .watch("/registry/pods/", Some(opts))
        .await
        .map_err(|e| e.to_string())?;
    while out.last().is_none_or(|c: &HistoryEntry| c.rev < to) {
        let msg = tokio::time::timeout(Duration::from_secs(30), stream.message())
            .await
            .map_err(|_| "etcd history read timed out".to_owned())?;
        let Ok(Some(resp)) = msg else {
            return Err("etcd history stream ended".into());
        };
        for ev in resp.events() {
            let Some(kv) = ev.kv() else { continue };
            let key = kv.key_str().unwrap_or_default();
            let name = key.rsplit('/').next().unwrap_or_default();
            let Some(id) = name.strip_prefix("pod-").and_then(|n| n.parse().ok()) else {
                continue;
            };
            out.push(HistoryEntry {
                rev: kv.mod_revision() as u64,
                id,
                new_node: (ev.event_type() == EventType::Put)
                    .then(|| codec.node_of(key, kv.value()))
                    .flatten(),
                old_node: ev.prev_kv().and_then(|p| codec.node_of(key, p.value())),
            });
        }
    }
    Ok(out)
}

/// The changes a watcher of `node` (or of everything, for `None`) must see, in order.
pub(super) fn expected(history: &[HistoryEntry], node: Option<usize>) -> Vec<(u64, u32)> {
    history
        .iter()
        .filter(|c| node.is_none() || c.new_node == node || c.old_node == node)
        .map(|c| (c.rev, c.id))
        .collect()
}

/// The comparison of one watcher's stream with what it must see.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Tally {
    pub delivered: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub out_of_order: u64,
    pub unexpected: u64,
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, o: Tally) {
        self.delivered += o.delivered;
        self.lost += o.lost;
        self.duplicated += o.duplicated;
        self.out_of_order += o.out_of_order;
        self.unexpected += o.unexpected;
    }
}

/// Compares a received stream with the expected one; calls `latency` with each delivered event's
/// revision and receive time.
pub(super) fn tally(
    received: &[Received],
    expected: &[(u64, u32)],
    horizon: u64,
    mut latency: impl FnMut(u64, u64),
) -> Tally {
    let want: HashSet<(u64, u32)> = expected.iter().copied().collect();
    let mut seen: HashSet<(u64, u32)> = HashSet::with_capacity(received.len());
    let mut t = Tally::default();
    let mut last_rev = 0;
    // Writes acknowledged after the writer's deadline are outside the measured window.
    for r in received.iter().filter(|r| r.rev <= horizon) {
        if r.rev < last_rev {
            t.out_of_order += 1;
        }
        last_rev = last_rev.max(r.rev);
        if !seen.insert((r.rev, r.id)) {
            t.duplicated += 1;
        } else if want.contains(&(r.rev, r.id)) {
            t.delivered += 1;
            latency(r.rev, r.at_us);
        } else {
            t.unexpected += 1;
        }
    }
    t.lost = want.len() as u64 - t.delivered;
    t
}

/// Percentiles (0..=100) of a sorted slice.
pub(super) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tallies_loss_duplicates_order_and_strays() {
        let r = |rev, id| Received { rev, id, at_us: 0 };
        let expected = [(1, 1), (2, 2), (3, 1)];
        let got = [r(1, 1), r(3, 1), r(2, 2), r(3, 1), r(9, 9)];
        let t = tally(&got, &expected, 9, |_, _| {});
        assert_eq!(
            t,
            Tally {
                delivered: 3,
                lost: 0,
                duplicated: 1,
                out_of_order: 1,
                unexpected: 1
            }
        );
        let t = tally(&[r(1, 1)], &expected, 9, |_, _| {});
        assert_eq!((t.delivered, t.lost), (1, 2));
        let h = [
            HistoryEntry {
                rev: 5,
                id: 1,
                new_node: Some(2),
                old_node: Some(1),
            },
            HistoryEntry {
                rev: 6,
                id: 2,
                new_node: Some(3),
                old_node: None,
            },
        ];
        assert_eq!(expected_of(&h, Some(1)), [(5, 1)]);
        assert_eq!(expected_of(&h, None).len(), 2);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), 3.0);
    }

    fn expected_of(h: &[HistoryEntry], n: Option<usize>) -> Vec<(u64, u32)> {
        expected(h, n)
    }
}
