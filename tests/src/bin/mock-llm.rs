//! `mock-llm [--port N] [--script FILE.json]`: serves a scripted mock LLM
//! (Anthropic `POST /v1/messages`, OpenAI `POST /v1/chat/completions`) for
//! manual trials. Prints `listening on http://127.0.0.1:PORT` to stdout and
//! logs each request to stderr until Ctrl-C.
//!
//! The script is a JSON list of turns (forms listed on `Turn`), e.g.
//! `[{"text":"hi"},{"tool_call":{"name":"read","args":{"path":"a.txt"}}},`
//! `{"status":429,"retry_after":1}]`.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use corral_e2e::mock_llm::{MockLlm, Turn};

const USAGE: &str = "usage: mock-llm [--port N] [--script FILE.json]";

struct Args {
    port: u16,
    script: Option<PathBuf>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        port: 0,
        script: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--port" => {
                let v = it.next().context("--port needs a value")?;
                args.port = v.parse().with_context(|| format!("bad port {v:?}"))?;
            }
            "--script" => args.script = Some(it.next().context("--script needs a file")?.into()),
            "-h" | "--help" => {
                eprintln!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    Ok(args)
}

fn load_script(path: &PathBuf) -> anyhow::Result<Vec<Turn>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing script {}", path.display()))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let turns = match &args.script {
        Some(path) => load_script(path)?,
        None => Vec::new(),
    };
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, args.port));
    let mock = MockLlm::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    mock.push_all(turns);

    // stdout carries only this line, so scripts can read the address.
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on http://{}", mock.addr())?;
    out.flush()?;
    drop(out);
    eprintln!(
        "{} scripted turns; Anthropic base {}, OpenAI base {}",
        mock.remaining(),
        mock.anthropic_base_url(),
        mock.openai_base_url()
    );

    let mut seen = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            _ = &mut ctrl_c => return Ok(()),
            _ = tick.tick() => {
                let requests = mock.requests();
                for (i, r) in requests.iter().enumerate().skip(seen) {
                    let model = r.body.get("model").and_then(|m| m.as_str()).unwrap_or("?");
                    eprintln!("#{} POST {} model={model}", i + 1, r.path);
                }
                if requests.len() > seen {
                    seen = requests.len();
                    eprintln!("{} scripted turns left", mock.remaining());
                }
            }
        }
    }
}
