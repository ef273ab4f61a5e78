//! Which etcd versions deliver watch progress notifications in order with events.
//!
//! Before 3.4.31 and 3.5.13, a progress notification could carry a revision ahead of events not yet
//! delivered to an unsynced watcher (etcd#15220, #17507). Kubernetes only serves consistent reads
//! from its cache on fixed versions; so do we.

/// Whether progress notifications from this etcd version prove the watcher has every event up to
/// their revision. Unparseable versions are treated as affected.
pub fn progress_is_reliable(version: &str) -> bool {
    let mut parts = version
        .trim()
        .trim_start_matches('v')
        .split(['.', '-', '+'])
        .map(|p| p.parse::<u64>().ok());
    let (Some(Some(major)), Some(Some(minor)), Some(Some(patch))) =
        (parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    match (major, minor) {
        (3, 4) => patch >= 31,
        (3, 5) => patch >= 13,
        (3, m) => m > 5,
        (m, _) => m > 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knows_the_fixed_versions() {
        for (v, ok) in [
            ("3.4.23", false),
            ("3.4.30", false),
            ("3.4.31", true),
            ("3.5.12", false),
            ("3.5.13", true),
            ("3.6.0", true),
            ("3.3.27", false),
            ("4.0.0", true),
            ("v3.5.21", true),
            ("garbage", false),
        ] {
            assert_eq!(progress_is_reliable(v), ok, "{v}");
        }
    }
}
