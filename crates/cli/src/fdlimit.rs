//! The open-file limit of `watchcache serve`: the soft `RLIMIT_NOFILE` is raised to the hard one
//! at start, as Go's runtime does for every Go program since 1.19 (kube-apiserver among them).
//!
//! Why: every connection is a file descriptor, and the soft limit is often 1 024 (systemd's
//! default for services, most shells'), a few hundred kubelets' worth; the hard one is where the
//! administrator meant to stop (524 288 under systemd). Past the soft limit `accept` fails with
//! `EMFILE` and new clients wait in the listen queue. The library does not touch the process's
//! limits (an embedding program owns its process); the binary does.
// getrlimit(2) and setrlimit(2) are unsafe by signature; each block says why it is sound.
#![allow(unsafe_code)]

/// The limit before and after [`raise`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpenFiles {
    /// The soft limit the process started with.
    pub was: u64,
    /// The soft limit in force now.
    pub soft: u64,
    /// The hard limit.
    pub hard: u64,
}

/// Raises the soft open-file limit to the hard one.
///
/// # Errors
/// `getrlimit` or `setrlimit` failed (a seccomp policy refusing them, say): the limit is as it was.
// `rlim_t` is u64 on Linux, not everywhere.
#[allow(clippy::useless_conversion)]
pub(crate) fn raise() -> std::io::Result<OpenFiles> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit`, which we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let was = lim.rlim_cur;
    if lim.rlim_cur < lim.rlim_max {
        let mut raised = lim;
        raised.rlim_cur = lim.rlim_max;
        // macOS refuses a soft limit above OPEN_MAX (Go caps it there too).
        #[cfg(target_os = "macos")]
        {
            raised.rlim_cur = raised.rlim_cur.min(10_240);
        }
        // SAFETY: setrlimit reads one `rlimit`, which we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        lim = raised;
    }
    Ok(OpenFiles {
        was: u64::from(was),
        soft: u64::from(lim.rlim_cur),
        hard: u64::from(lim.rlim_max),
    })
}

/// The default of `--max-idle-connections`: a quarter of `--max-connections`, and at most half
/// the open-file limit, so that silent connections leave at least half the descriptors to the
/// connections that asked for something, the upstream's, files, and the refusals' short lingers.
pub(crate) fn default_max_idle(max_connections: usize, open_files: Option<u64>) -> usize {
    let by_connections = max_connections / 4;
    let by_files = open_files.map_or(usize::MAX, |f| usize::try_from(f / 2).unwrap_or(usize::MAX));
    // 0 would mean no bound at all.
    by_connections.min(by_files).max(1)
}

/// The default of `--max-idle-connections-per-address`: a quarter of the silent connections'
/// bound, at least 256 (0, no bound, stays none). One address then cannot take more than a
/// quarter of the budget from the others, while a client opening hundreds of HTTP/1.1 watches at
/// once (a TLS handshake each) is not refused: a fixed 256 refused the equality suite's ~250
/// concurrent watches of one kube-rs client with 503.
pub(crate) fn default_max_idle_per_address(max_idle: usize) -> usize {
    if max_idle == 0 {
        0
    } else {
        (max_idle / 4).max(256)
    }
}

#[cfg(test)]
#[allow(clippy::useless_conversion)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as in `raise`.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        // Lowered by one below the hard limit (this test process keeps far fewer files open).
        let lowered = libc::rlimit {
            rlim_cur: lim.rlim_max - 1,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: as in `raise`.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lowered) }, 0);
        let got = raise().unwrap();
        assert_eq!(got.was, u64::from(lim.rlim_max - 1));
        assert_eq!(got.soft, got.hard);
        assert_eq!(got.hard, u64::from(lim.rlim_max));
        // SAFETY: as in `raise`.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        assert_eq!(lim.rlim_cur, lim.rlim_max, "in force");
    }

    #[test]
    fn one_address_gets_a_quarter_of_the_silent_connections_and_at_least_256() {
        assert_eq!(default_max_idle_per_address(10_000), 2_500);
        assert_eq!(default_max_idle_per_address(512), 256);
        assert_eq!(default_max_idle_per_address(0), 0);
    }

    #[test]
    fn silent_connections_get_at_most_half_the_files_and_a_quarter_of_the_connections() {
        assert_eq!(default_max_idle(250_000, Some(1_024)), 512);
        assert_eq!(default_max_idle(250_000, Some(1_048_576)), 62_500);
        assert_eq!(default_max_idle(250_000, None), 62_500);
        assert_eq!(default_max_idle(100, Some(1_024)), 25);
        assert_eq!(
            default_max_idle(2, Some(1_024)),
            1,
            "never 0, which is no bound"
        );
    }
}
