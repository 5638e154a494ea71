//! End-to-end: what `deploy/corral.service` relies on. The gateway sends
//! `READY=1` to `$NOTIFY_SOCKET` once it accepts connections and
//! `STOPPING=1` on SIGTERM; `deploy/corral.toml.example` is a valid config.

#![allow(clippy::unwrap_used)]

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::Duration;

use corral_e2e::gateway::GatewaySpawn;
use corral_e2e::harness::READ_TIMEOUT;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The next datagram on `socket`, waiting at most [`READ_TIMEOUT`].
async fn next_state(socket: UnixDatagram) -> (UnixDatagram, String) {
    tokio::task::spawn_blocking(move || {
        socket.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        let mut buf = [0u8; 512];
        let n = socket.recv(&mut buf).expect("no notification arrived");
        let text = String::from_utf8(buf[..n].to_vec()).unwrap();
        (socket, text)
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn the_gateway_notifies_ready_once_listening_and_stopping_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let manager = UnixDatagram::bind(&path).unwrap();
    let mut gateway = GatewaySpawn::default()
        .echo()
        .env("NOTIFY_SOCKET", path.to_str().unwrap())
        .spawn()
        .await;

    let (manager, state) = next_state(manager).await;
    assert_eq!(state, "READY=1");
    // Ready means serving.
    let (status, body) = gateway.http_get("/healthz", None).await;
    assert_eq!((status, body.trim()), (200, "ok"));
    let mut ws = gateway.client("alpha").await;
    let pong = ws
        .request(serde_json::json!({"id":"1","type":"ping"}))
        .await;
    assert_eq!(pong["success"], true);

    let pid = Pid::from_raw(gateway.child.id().unwrap() as i32);
    kill(pid, Signal::SIGTERM).unwrap();
    let (_, state) = next_state(manager).await;
    assert_eq!(state, "STOPPING=1");
    let status = tokio::time::timeout(READ_TIMEOUT, gateway.child.wait())
        .await
        .expect("the gateway did not stop")
        .unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn the_gateway_ignores_an_absent_notify_socket() {
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("nobody-listens.sock");
    let gateway = GatewaySpawn::default()
        .echo()
        .env("NOTIFY_SOCKET", gone.to_str().unwrap())
        .spawn()
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (status, _) = gateway.http_get("/readyz", None).await;
    assert_eq!(status, 200);
}

/// `deploy/corral.toml.example` parses and starts a gateway (the flags the
/// harness passes replace its paths and listen address).
#[tokio::test]
async fn the_example_config_is_accepted() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/corral.toml.example");
    assert!(example.is_file(), "{}", example.display());
    let gateway = GatewaySpawn::default()
        .echo()
        .arg("--config")
        .arg(example.to_str().unwrap())
        .spawn()
        .await;
    let mut ws = gateway.client("alpha").await;
    let pong = ws
        .request(serde_json::json!({"id":"1","type":"ping"}))
        .await;
    assert_eq!(pong["success"], true);
}
