//! HTTP/2 by prior knowledge on the plain listener (h2c): a connection
//! whose first bytes are the HTTP/2 connection preface is served as
//! HTTP/2, any other as HTTP/1.1. The bytes are only peeked, so whichever
//! protocol serves the connection reads them itself. A connection that
//! sent only part of the preface is peeked again after a wait that
//! doubles each time, up to [`MAX_REPEEK`]: a crowd of sockets that stop
//! there costs a few wake-ups each until `--header-timeout`, not one
//! every few milliseconds.

use std::time::Duration;

use tokio::net::TcpStream;

/// The client connection preface of HTTP/2 (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The first wait before peeking again at a connection that sent only
/// part of what decides it (a preface split by the network is whole a
/// moment later).
const REPEEK: Duration = Duration::from_millis(5);
/// The longest wait between two peeks.
const MAX_REPEEK: Duration = Duration::from_secs(1);

/// What the first bytes say: `Some(true)` the HTTP/2 preface,
/// `Some(false)` anything else, `None` too few to tell.
pub fn is_preface(first: &[u8]) -> Option<bool> {
    let n = first.len().min(PREFACE.len());
    if first[..n] != PREFACE[..n] {
        return Some(false);
    }
    (n == PREFACE.len()).then_some(true)
}

/// Whether `stream` opens with the HTTP/2 preface; waits for enough bytes
/// (callers bound the wait). A connection that closes first is not.
pub async fn sniff(stream: &TcpStream) -> std::io::Result<bool> {
    let mut first = [0u8; PREFACE.len()];
    let mut wait = REPEEK;
    loop {
        let n = stream.peek(&mut first).await?;
        if n == 0 {
            return Ok(false);
        }
        if let Some(h2) = is_preface(&first[..n]) {
            return Ok(h2);
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(MAX_REPEEK);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;

    #[test]
    fn the_preface_decides_and_a_request_line_does_not_wait() {
        assert_eq!(is_preface(PREFACE), Some(true));
        assert_eq!(is_preface(b"PRI * HT"), None);
        assert_eq!(is_preface(b"P"), None);
        assert_eq!(
            is_preface(b"POST /v1/projects/a/acp HTTP/1.1\r\n"),
            Some(false)
        );
        assert_eq!(is_preface(b"GET / HTTP/1.1\r\n"), Some(false));
        assert_eq!(is_preface(b"PRI * HTTP/1.1\r\n"), Some(false));
    }

    #[tokio::test]
    async fn sniffing_leaves_the_bytes_for_the_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        for (sent, h2) in [(PREFACE, true), (&b"GET / HTTP/1.1\r\n\r\n"[..], false)] {
            let mut client = TcpStream::connect(addr).await.unwrap();
            let (server, _) = listener.accept().await.unwrap();
            // In two pieces: the first alone cannot decide the preface.
            client.write_all(&sent[..1]).await.unwrap();
            let sniffed = tokio::spawn(async move {
                let h2 = sniff(&server).await.unwrap();
                (h2, server)
            });
            tokio::time::sleep(Duration::from_millis(20)).await;
            client.write_all(&sent[1..]).await.unwrap();
            let (found, server) = sniffed.await.unwrap();
            assert_eq!(found, h2);
            let mut all = vec![0u8; sent.len()];
            let n = server.peek(&mut all).await.unwrap();
            assert_eq!(&all[..n], &sent[..n], "nothing was consumed");
        }
    }

    /// A stranger that sends the first bytes of the preface and then
    /// nothing must not have its socket looked at every few milliseconds
    /// until `--header-timeout`: thousands of such sockets would keep the
    /// gateway's cores busy before anyone has shown a credential.
    #[tokio::test(start_paused = true)]
    async fn a_partial_preface_is_not_polled_while_nothing_arrives() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        client.write_all(b"PRI").await.unwrap();
        let mut polls = 0u32;
        let sniffing = sniff(&server);
        tokio::pin!(sniffing);
        let counted = std::future::poll_fn(|cx| {
            polls += 1;
            sniffing.as_mut().poll(cx)
        });
        let waited = tokio::time::timeout(Duration::from_secs(10), counted).await;
        assert!(waited.is_err(), "three bytes cannot decide");
        assert!(polls <= 20, "polled {polls} times while nothing arrived");
    }
}
