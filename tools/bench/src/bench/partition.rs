//! A TCP proxy between the cache server and etcd that the bench can cut and heal: a network
//! partition made on purpose, so that etcd's history piles up while the cache is cut off and the
//! cache must then catch up from it (`--model catchup`).
//!
//! A cut closes every forwarded connection at once and closes new ones as they arrive, so the
//! follower sees its watch fail (as after a real partition, once its keepalive gives up), backs
//! off and retries. Merely pausing the bytes would end the same way, only later: the etcd client's
//! keepalive (2 s, 3 s timeout) drops a connection whose pings go unanswered.

use std::time::Instant;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tracing::debug;

/// Bytes per read in each direction (etcd's catch-up responses are up to a few MiB).
const BUFFER: usize = 64 * 1024;

/// The proxy, listening on loopback, forwarding to one etcd; stopped on drop.
pub(super) struct Partition {
    /// The URL to give the server instead of etcd's.
    pub url: String,
    cut: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Partition {
    /// Listens on a free loopback port and forwards to `target` (`http://host:port`).
    pub(super) fn start(target: &str) -> Result<Partition, String> {
        let upstream = target
            .strip_prefix("http://")
            .unwrap_or(target)
            .trim_end_matches('/')
            .to_owned();
        let std = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        std.set_nonblocking(true).map_err(|e| e.to_string())?;
        let addr = std.local_addr().map_err(|e| e.to_string())?;
        let listener = TcpListener::from_std(std).map_err(|e| e.to_string())?;
        let (cut, _) = watch::channel(false);
        let task = tokio::spawn(accept(listener, upstream, cut.clone()));
        Ok(Partition {
            url: format!("http://{addr}"),
            cut,
            task,
        })
    }

    /// Cuts the link: every forwarded connection closes, new ones are closed on arrival.
    pub(super) fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Heals the link; returns the moment.
    pub(super) fn heal(&self) -> Instant {
        self.cut.send_replace(false);
        Instant::now()
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept(listener: TcpListener, upstream: String, cut: watch::Sender<bool>) {
    loop {
        let Ok((mut down, _)) = listener.accept().await else {
            continue;
        };
        if *cut.borrow() {
            debug!("partition: connection refused while cut");
            continue;
        }
        let mut cut_rx = cut.subscribe();
        let upstream = upstream.clone();
        tokio::spawn(async move {
            let Ok(mut up) = TcpStream::connect(upstream.as_str()).await else {
                return;
            };
            let _ = (down.set_nodelay(true), up.set_nodelay(true));
            tokio::select! {
                _ = tokio::io::copy_bidirectional_with_sizes(&mut down, &mut up, BUFFER, BUFFER) => {}
                // Both ends are dropped: the server's client sees its connection reset.
                _ = cut_rx.wait_for(|c| *c) => {}
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn forwards_cuts_and_heals() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let echo_addr = echo.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = echo.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut b = [0u8; 64];
                    while let Ok(n) = s.read(&mut b).await {
                        if n == 0 || s.write_all(&b[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let p = Partition::start(&format!("http://{echo_addr}")).unwrap();
        let addr = p.url.strip_prefix("http://").unwrap().to_owned();
        let roundtrip = |mut s: TcpStream| async move {
            s.write_all(b"ping").await.ok()?;
            let mut b = [0u8; 4];
            s.read_exact(&mut b).await.ok()?;
            Some((b, s))
        };
        let (b, mut open) = roundtrip(TcpStream::connect(&addr).await.unwrap())
            .await
            .unwrap();
        assert_eq!(&b, b"ping");
        p.cut();
        // The open connection is closed, and a new one is closed on arrival.
        let mut b = [0u8; 4];
        assert_eq!(open.read(&mut b).await.unwrap_or(0), 0);
        assert!(
            roundtrip(TcpStream::connect(&addr).await.unwrap())
                .await
                .is_none()
        );
        p.heal();
        let (b, _) = roundtrip(TcpStream::connect(&addr).await.unwrap())
            .await
            .unwrap();
        assert_eq!(&b, b"ping");
    }
}
