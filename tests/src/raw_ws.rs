//! A raw WebSocket client for tests that must send what a client library
//! would refuse to (a frame declaring 15 MiB, streamed in chunks) while
//! reading the gateway's close at the same time.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpSocket, TcpStream};

use crate::gateway::Gateway;

/// An upgraded connection, split so one task can write while another reads.
pub struct Raw {
    pub read: OwnedReadHalf,
    pub write: OwnedWriteHalf,
}

impl Raw {
    /// Connects (from `source`, if given) and completes the handshake.
    pub async fn open(gateway: &Gateway, source: Option<IpAddr>, extra_headers: &str) -> Raw {
        let stream = match source {
            Some(ip) => {
                let socket = TcpSocket::new_v4().expect("socket");
                socket
                    .bind(SocketAddr::new(ip, 0))
                    .expect("bind the source address");
                socket.connect(gateway.addr).await.expect("connect")
            }
            None => TcpStream::connect(gateway.addr).await.expect("connect"),
        };
        let (mut read, mut write) = stream.into_split();
        let request = format!(
            "GET /v1/projects/alpha/rpc HTTP/1.1\r\nHost: {}\r\nConnection: Upgrade\r\n\
             Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{extra_headers}\r\n",
            gateway.addr
        );
        write
            .write_all(request.as_bytes())
            .await
            .expect("write the upgrade request");
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            let n = timeout(read.read(&mut byte))
                .await
                .expect("read the upgrade answer");
            assert_eq!(n, 1, "closed during the handshake: {head:?}");
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head);
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        Raw { read, write }
    }

    /// Sends one masked text frame.
    pub async fn send_text(&mut self, text: &str) {
        let mut frame = header(0x81, text.len() as u64);
        frame.extend_from_slice(text.as_bytes());
        self.write.write_all(&frame).await.expect("send a frame");
    }

    /// The next text frame as JSON.
    pub async fn recv(&mut self) -> Value {
        loop {
            let (opcode, payload) = timeout(read_frame(&mut self.read)).await.expect("a frame");
            match opcode {
                1 => return serde_json::from_slice(&payload).expect("a JSON frame"),
                8 => panic!("closed: {:?}", close_of(&payload)),
                _ => continue,
            }
        }
    }
}

/// The next frame: (opcode, payload); `None` when the connection ends.
pub async fn read_frame(read: &mut OwnedReadHalf) -> Option<(u8, Vec<u8>)> {
    let mut head = [0u8; 2];
    read.read_exact(&mut head).await.ok()?;
    let len = match head[1] & 0x7F {
        126 => u64::from(read.read_u16().await.ok()?),
        127 => read.read_u64().await.ok()?,
        n => u64::from(n),
    };
    let mut payload = vec![0u8; len as usize];
    read.read_exact(&mut payload).await.ok()?;
    Some((head[0] & 0x0F, payload))
}

/// Reads until the close frame: its code and reason (`None` if the
/// connection ended without one).
pub async fn read_close(read: &mut OwnedReadHalf) -> Option<(u16, String)> {
    loop {
        match timeout(read_frame(read)).await {
            Some((8, payload)) => return close_of(&payload),
            Some(_) => continue,
            None => return None,
        }
    }
}

/// Streams a frame of `len` bytes while reading: the close the gateway
/// sends for it.
pub async fn close_for_frame(raw: Raw, len: u64) -> (u16, String) {
    let Raw {
        mut read,
        mut write,
    } = raw;
    let writer = tokio::spawn(async move { stream_frame(&mut write, len).await });
    let close = read_close(&mut read).await.expect("a close frame");
    writer.abort();
    close
}

/// A masked frame header (mask of zeros, so the payload goes as is).
pub fn header(first: u8, len: u64) -> Vec<u8> {
    let mut out = vec![first];
    match len {
        0..=125 => out.push(0x80 | len as u8),
        126..=0xFFFF => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            out.push(0x80 | 127);
            out.extend_from_slice(&len.to_be_bytes());
        }
    }
    out.extend_from_slice(&[0, 0, 0, 0]);
    out
}

pub fn close_of(payload: &[u8]) -> Option<(u16, String)> {
    let code = u16::from_be_bytes([*payload.first()?, *payload.get(1)?]);
    Some((code, String::from_utf8_lossy(&payload[2..]).into_owned()))
}

/// Writes a text frame declaring `len` bytes, then up to `len` bytes of
/// payload in chunks, until done or the gateway stops reading.
pub async fn stream_frame(write: &mut OwnedWriteHalf, len: u64) {
    let chunk = vec![b'x'; 64 << 10];
    if write.write_all(&header(0x81, len)).await.is_err() {
        return;
    }
    let mut sent = 0;
    while sent < len {
        let n = chunk.len().min((len - sent) as usize);
        let write = tokio::time::timeout(Duration::from_secs(5), write.write_all(&chunk[..n]));
        match write.await {
            Ok(Ok(())) => sent += n as u64,
            _ => return,
        }
    }
}

pub async fn timeout<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), future)
        .await
        .expect("timed out")
}
