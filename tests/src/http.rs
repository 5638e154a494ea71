//! A minimal HTTP/1.1 client on one kept-alive TCP connection, for tests
//! that set every header themselves (`Authorization`, `X-Forwarded-For`,
//! WebSocket upgrades) and compare whole responses, headers included.

use std::net::{IpAddr, SocketAddr};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpSocket, TcpStream};

use crate::raw_ws::timeout;

/// One response: status, headers in order (names lowercased) and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The headers without `Date` (which differs between any two answers).
    pub fn headers_but_date(&self) -> Vec<(String, String)> {
        self.headers
            .iter()
            .filter(|(n, _)| n != "date")
            .cloned()
            .collect()
    }
}

/// A kept-alive connection.
pub struct Conn {
    stream: BufReader<TcpStream>,
    host: String,
}

impl Conn {
    pub async fn connect(addr: SocketAddr) -> Conn {
        let stream = timeout(TcpStream::connect(addr)).await.expect("connect");
        Conn {
            stream: BufReader::new(stream),
            host: addr.to_string(),
        }
    }

    /// Connects from the local address `from` (e.g. `127.0.0.2`, which
    /// any program on the host may use), as a tool on the gateway's host
    /// can.
    pub async fn connect_from(from: IpAddr, addr: SocketAddr) -> Conn {
        let socket = match from {
            IpAddr::V4(_) => TcpSocket::new_v4(),
            IpAddr::V6(_) => TcpSocket::new_v6(),
        }
        .expect("socket");
        socket.bind(SocketAddr::new(from, 0)).expect("bind");
        let stream = timeout(socket.connect(addr)).await.expect("connect");
        Conn {
            stream: BufReader::new(stream),
            host: addr.to_string(),
        }
    }

    /// Sends `METHOD path` with `headers` (and `Host`); the response, or
    /// `None` if the connection closed first. A `101` answer has no body
    /// and leaves the socket to [`Conn::into_stream`].
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Option<Response> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.host);
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if method != "GET" {
            head.push_str("Content-Length: 0\r\n");
        }
        head.push_str("\r\n");
        self.stream
            .get_mut()
            .write_all(head.as_bytes())
            .await
            .ok()?;
        timeout(self.read_response()).await
    }

    async fn read_response(&mut self) -> Option<Response> {
        let mut line = String::new();
        self.stream.read_line(&mut line).await.ok()?;
        let status = line.split_whitespace().nth(1)?.parse().ok()?;
        let mut headers = Vec::new();
        loop {
            line.clear();
            self.stream.read_line(&mut line).await.ok()?;
            let trimmed = line.trim_end();
            if trimmed.is_empty() {
                break;
            }
            let (name, value) = trimmed.split_once(':')?;
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
        let mut response = Response {
            status,
            headers,
            body: Vec::new(),
        };
        if status == 101 {
            return Some(response);
        }
        match response.header("content-length").map(str::parse::<usize>) {
            Some(Ok(len)) => {
                response.body = vec![0; len];
                self.stream.read_exact(&mut response.body).await.ok()?;
            }
            _ => {
                self.stream.read_to_end(&mut response.body).await.ok()?;
            }
        }
        Some(response)
    }

    /// The socket, after a `101` (with nothing buffered past the head).
    pub fn into_stream(self) -> TcpStream {
        assert!(self.stream.buffer().is_empty(), "bytes after the 101 head");
        self.stream.into_inner()
    }
}

/// One request on a fresh connection.
pub async fn exchange(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Response {
    Conn::connect(addr)
        .await
        .request(method, path, headers)
        .await
        .expect("a response")
}

/// The headers of a WebSocket upgrade (a fixed key).
pub const UPGRADE: [(&str, &str); 4] = [
    ("Connection", "Upgrade"),
    ("Upgrade", "websocket"),
    ("Sec-WebSocket-Version", "13"),
    ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
];
