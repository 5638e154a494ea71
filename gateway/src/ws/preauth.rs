//! A WebSocket client before it is authenticated: its first text message
//! read under a byte budget (`--max-hello-bytes`), the gateway's answers
//! written as raw frames, and the lingering close.
//!
//! Nothing here buffers more than the budget: a frame whose header
//! declares more is refused before its payload is read, so a socket that
//! never authenticates costs at most `--max-hello-bytes` of memory.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::close::CloseCode;
use super::frame::{self, Header};

/// Bytes read per call (the budget bounds the total).
const READ_CHUNK: usize = 8 << 10;
/// After a close frame, how long the rest of what the client sends is
/// read and dropped, so that the close is not lost to a TCP reset.
pub const LINGER: Duration = Duration::from_secs(2);

/// Why no first message was read.
#[derive(Debug, thiserror::Error)]
pub enum PreAuthError {
    #[error("more than {0} bytes before authentication")]
    TooLarge(usize),
    #[error("the connection closed before the hello")]
    Closed,
    #[error("binary frames are not supported; send JSON text frames")]
    Binary,
    #[error("invalid WebSocket frame: {0}")]
    Protocol(#[from] frame::ProtocolError),
    #[error("the first message is not UTF-8")]
    NotUtf8,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// The first text message and the bytes read after it (the start of the
/// next frames, for tungstenite to continue from).
#[derive(Debug)]
pub struct FirstMessage {
    pub text: String,
    pub leftover: Vec<u8>,
}

/// Reads frames until one whole text message, answering pings, within
/// `budget` bytes in all.
pub async fn read_first_text<S>(io: &mut S, budget: usize) -> Result<FirstMessage, PreAuthError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf: Vec<u8> = Vec::with_capacity(budget.min(READ_CHUNK));
    // Start of the first frame not yet handled.
    let mut pos = 0;
    // A fragmented text message being assembled.
    let mut message: Option<Vec<u8>> = None;
    loop {
        if let Some(header) = frame::parse_header(&buf[pos..])? {
            let end = u64::try_from(pos)
                .unwrap_or(u64::MAX)
                .saturating_add(header.frame_len());
            if end > u64::try_from(budget).unwrap_or(u64::MAX) {
                return Err(PreAuthError::TooLarge(budget));
            }
            // Within the budget, so it fits in usize.
            let end = usize::try_from(end).unwrap_or(usize::MAX);
            if buf.len() >= end {
                let payload = payload(&buf[pos..end], &header);
                pos = end;
                if let Some(text) = handle(io, header, payload, &mut message).await? {
                    let text = String::from_utf8(text).map_err(|_| PreAuthError::NotUtf8)?;
                    let leftover = buf[pos..].to_vec();
                    return Ok(FirstMessage { text, leftover });
                }
                continue;
            }
        }
        if buf.len() >= budget {
            return Err(PreAuthError::TooLarge(budget));
        }
        let room = (budget - buf.len()).min(READ_CHUNK);
        let start = buf.len();
        buf.resize(start + room, 0);
        let n = io.read(&mut buf[start..]).await?;
        buf.truncate(start + n);
        if n == 0 {
            return Err(PreAuthError::Closed);
        }
    }
}

/// The unmasked payload of the complete frame `bytes`.
fn payload(bytes: &[u8], header: &Header) -> Vec<u8> {
    let mut payload = bytes[header.header_len..].to_vec();
    frame::apply_mask(&mut payload, header.mask);
    payload
}

/// One frame: `Some(text)` once a text message is complete.
async fn handle<S>(
    io: &mut S,
    header: Header,
    payload: Vec<u8>,
    message: &mut Option<Vec<u8>>,
) -> Result<Option<Vec<u8>>, PreAuthError>
where
    S: AsyncWrite + Unpin,
{
    let protocol = |reason| PreAuthError::Protocol(frame::ProtocolError(reason));
    match header.opcode {
        frame::PING => {
            io.write_all(&frame::encode(frame::PONG, &payload)).await?;
            Ok(None)
        }
        frame::PONG => Ok(None),
        frame::CLOSE => Err(PreAuthError::Closed),
        frame::BINARY => Err(PreAuthError::Binary),
        frame::TEXT if message.is_some() => Err(protocol("a new message inside a fragmented one")),
        frame::TEXT if header.fin => Ok(Some(payload)),
        frame::TEXT => {
            *message = Some(payload);
            Ok(None)
        }
        // CONTINUATION
        _ => {
            let Some(mut text) = message.take() else {
                return Err(protocol("a continuation without a message"));
            };
            text.extend_from_slice(&payload);
            if header.fin {
                return Ok(Some(text));
            }
            *message = Some(text);
            Ok(None)
        }
    }
}

/// Writes one text frame.
pub async fn send_text<S: AsyncWrite + Unpin>(io: &mut S, text: &[u8]) -> std::io::Result<()> {
    io.write_all(&frame::encode(frame::TEXT, text)).await
}

/// Writes a close frame, then [`linger`]s.
pub async fn close<S>(io: &mut S, code: CloseCode, reason: &str)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if io
        .write_all(&frame::close(code.code(), reason))
        .await
        .is_ok()
    {
        linger(io).await;
    }
}

/// Ends the sending side and reads (and drops) what the client still
/// sends, for at most [`LINGER`]: closing a socket with unread input
/// resets it, and the reset can destroy the close frame before the
/// client reads it.
pub async fn linger<S>(io: &mut S)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let _ = tokio::time::timeout(LINGER, async {
        let _ = io.flush().await;
        let _ = io.shutdown().await;
        let mut sink = [0u8; READ_CHUNK];
        while matches!(io.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::duplex;

    fn client_frame(first: u8, payload: &[u8]) -> Vec<u8> {
        let mask = [7, 1, 9, 3];
        let mut out = frame::encode(first & 0x0F, payload);
        out[0] = first;
        out[1] |= 0x80;
        let at = out.len() - payload.len();
        out.splice(at..at, mask);
        frame::apply_mask(&mut out[at + 4..], mask);
        out
    }

    #[tokio::test]
    async fn reads_a_hello_and_keeps_what_follows() {
        let (mut client, mut server) = duplex(1 << 16);
        let mut bytes = client_frame(0x89, b"p");
        bytes.extend(client_frame(0x01, b"{\"type\":"));
        bytes.extend(client_frame(0x80, b"\"hello\"}"));
        bytes.extend(client_frame(0x81, b"next"));
        client.write_all(&bytes).await.unwrap();
        let first = read_first_text(&mut server, 1024).await.unwrap();
        assert_eq!(first.text, "{\"type\":\"hello\"}");
        assert_eq!(first.leftover, client_frame(0x81, b"next"));
        // The ping was answered.
        let mut pong = [0u8; 3];
        client.read_exact(&mut pong).await.unwrap();
        assert_eq!(pong, [0x8A, 1, b'p']);
    }

    #[tokio::test]
    async fn a_frame_declared_larger_than_the_budget_is_refused_at_its_header() {
        let (mut client, mut server) = duplex(1 << 16);
        let mut header = vec![0x81, 0x80 | 127];
        header.extend_from_slice(&((15u64 << 20) - 1).to_be_bytes());
        header.extend_from_slice(&[0; 4]);
        client.write_all(&header).await.unwrap();
        let err = read_first_text(&mut server, 64 << 10).await.unwrap_err();
        assert!(matches!(err, PreAuthError::TooLarge(65536)), "{err}");
    }

    #[tokio::test]
    async fn many_small_frames_share_one_budget() {
        let (mut client, mut server) = duplex(1 << 16);
        let mut bytes = Vec::new();
        for _ in 0..100 {
            bytes.extend(client_frame(0x89, b"0123456789"));
        }
        client.write_all(&bytes).await.unwrap();
        let err = read_first_text(&mut server, 512).await.unwrap_err();
        assert!(matches!(err, PreAuthError::TooLarge(512)), "{err}");
    }

    #[tokio::test]
    async fn binary_close_and_eof_end_it() {
        let (mut client, mut server) = duplex(1 << 16);
        client.write_all(&client_frame(0x82, b"x")).await.unwrap();
        let err = read_first_text(&mut server, 512).await.unwrap_err();
        assert!(matches!(err, PreAuthError::Binary));
        let (mut client, mut server) = duplex(1 << 16);
        client
            .write_all(&client_frame(0x88, &[3, 232]))
            .await
            .unwrap();
        let err = read_first_text(&mut server, 512).await.unwrap_err();
        assert!(matches!(err, PreAuthError::Closed));
        let (client, mut server) = duplex(1 << 16);
        drop(client);
        let err = read_first_text(&mut server, 512).await.unwrap_err();
        assert!(matches!(err, PreAuthError::Closed));
    }
}
