//! The hidden `corral-agent egress-relay` on the host (the relay itself
//! does not make a network namespace): a fake gateway on a Unix socket
//! must see the preamble with the secret, then the tool's own bytes; the
//! command sees the proxy variables and not the secret; the relay exits as
//! the command does.

#![allow(clippy::unwrap_used)]

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixListener;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::mpsc;
use std::time::Duration;

use corral_protocol::egress::{preamble, NO_PROXY, SECRET_BYTES, SECRET_ENV};
use nix::fcntl::{fcntl, FcntlArg, FdFlag};

fn secret() -> String {
    "5e".repeat(SECRET_BYTES)
}

/// A fake gateway: accepts one connection, sends back what it read up to
/// the end of the request head, and answers the CONNECT with 200.
struct FakeGateway {
    _dir: tempfile::TempDir,
    socket: OwnedFd,
    received: mpsc::Receiver<String>,
}

impl FakeGateway {
    fn start() -> FakeGateway {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("proxy.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let (tx, received) = mpsc::channel();
        std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            while !head.ends_with("\r\n\r\n") {
                if reader.read_line(&mut head).unwrap() == 0 {
                    break;
                }
            }
            let _ = tx.send(head);
            let _ = (&stream).write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
        });
        FakeGateway {
            socket: inheritable_path_fd(&path),
            _dir: dir,
            received,
        }
    }

    fn received(&self) -> String {
        self.received
            .recv_timeout(Duration::from_secs(20))
            .expect("the fake gateway got no connection")
    }
}

/// `path` opened `O_PATH`, without `FD_CLOEXEC`: the relays this test
/// starts inherit it under the same number.
fn inheritable_path_fd(path: &Path) -> OwnedFd {
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(path)
        .unwrap();
    fcntl(file.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::empty())).unwrap();
    file.into()
}

/// Runs `bash -c script` behind the relay on a free loopback port.
fn relay(socket: &OwnedFd, secret: Option<&str>, script: &str) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_corral-agent"));
    command
        .args(["egress-relay", "--listen", "127.0.0.1:0", "--socket-fd"])
        .arg(socket.as_raw_fd().to_string())
        .args(["--", "bash", "-c", script])
        .env_remove("HTTP_PROXY")
        .env_remove("NO_PROXY");
    match secret {
        Some(secret) => command.env(SECRET_ENV, secret),
        None => command.env_remove(SECRET_ENV),
    };
    command.output().unwrap()
}

/// Connects to the relay from `$HTTP_PROXY` with bash's /dev/tcp, asks for
/// a tunnel and prints the status line.
const CONNECT: &str = r#"
set -e
hostport=${HTTP_PROXY#http://}
exec 3<>"/dev/tcp/${hostport%:*}/${hostport##*:}"
printf 'CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n' >&3
IFS= read -r status <&3
echo "status=${status%$'\r'}"
"#;

#[test]
fn a_tool_connection_reaches_the_gateway_behind_the_preamble() {
    let gateway = FakeGateway::start();
    let script = format!(
        "{CONNECT}
echo \"secret=${{{SECRET_ENV}-unset}}\"
echo \"https=$HTTPS_PROXY lower=$http_proxy,$https_proxy no=$NO_PROXY,$no_proxy\""
    );
    let output = relay(&gateway.socket, Some(&secret()), &script);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        gateway.received(),
        format!(
            "{}CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n",
            preamble(&secret())
        )
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "status=HTTP/1.1 200 Connection established");
    assert_eq!(lines[1], "secret=unset", "the command saw the secret");
    let proxy = lines[2]
        .strip_prefix("https=http://127.0.0.1:")
        .and_then(|rest| rest.split_once(' '))
        .map(|(port, rest)| (port.parse::<u16>().unwrap(), rest))
        .unwrap_or_else(|| panic!("{}", lines[2]));
    assert_ne!(proxy.0, 0);
    let url = format!("http://127.0.0.1:{}", proxy.0);
    assert_eq!(
        proxy.1,
        format!("lower={url},{url} no={NO_PROXY},{NO_PROXY}")
    );
}

#[test]
fn the_relay_exits_as_its_command_does() {
    let gateway = FakeGateway::start();
    let code = |script: &str| relay(&gateway.socket, Some(&secret()), script).status;
    assert_eq!(code("exit 0").code(), Some(0));
    assert_eq!(code("exit 3").code(), Some(3));
    let killed = code("kill -TERM $$");
    assert_eq!(killed.signal(), Some(libc::SIGTERM), "{killed:?}");

    let mut missing = Command::new(env!("CARGO_BIN_EXE_corral-agent"));
    let output = missing
        .args(["egress-relay", "--listen", "127.0.0.1:0", "--socket-fd"])
        .arg(gateway.socket.as_raw_fd().to_string())
        .args(["--", "/definitely/not/a/program"])
        .env(SECRET_ENV, secret())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(127), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/definitely/not/a/program"), "{stderr}");
}

#[test]
fn the_relay_refuses_to_start_without_its_secret_or_socket() {
    let gateway = FakeGateway::start();
    for secret in [None, Some("not-hex")] {
        let output = relay(&gateway.socket, secret, "echo ran");
        assert_eq!(output.status.code(), Some(78), "{output:?}");
        assert!(output.stdout.is_empty(), "the command ran: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(SECRET_ENV), "{stderr}");
    }
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain");
    std::fs::write(&plain, "x").unwrap();
    let output = relay(&inheritable_path_fd(&plain), Some(&secret()), "echo ran");
    assert_eq!(output.status.code(), Some(78), "{output:?}");
    assert!(output.stdout.is_empty(), "the command ran: {output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not a socket"), "{stderr}");
}
