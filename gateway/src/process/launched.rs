//! A child started by [`sys::launch`](super::sys::launch): what it
//! executes, prepared from a [`SpawnSpec`] before the clone ([`exec_of`]),
//! and the handle the gateway waits on ([`Launched`]), in place of
//! `std::process::Child` (it is killed through its process group).

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use nix::libc;
use nix::unistd::{access, AccessFlags, Pid};

use super::spec::SpawnSpec;
use super::sys::Exec;

/// Where a bare program name is looked up when neither the child's
/// environment nor the gateway's has `PATH`.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// What `spec` executes, with its stdio. `chdir` names the directory to
/// enter by path (when the spec has no directory descriptor).
pub(super) fn exec_of(
    spec: &SpawnSpec,
    chdir: Option<&Path>,
    stdio: [OwnedFd; 3],
) -> std::io::Result<Exec> {
    let program = resolve(&spec.program, &spec.env)?;
    let argv = std::iter::once(spec.program.as_os_str())
        .chain(spec.args.iter().map(OsString::as_os_str))
        .map(c_string)
        .collect::<std::io::Result<_>>()?;
    let envp = spec
        .env
        .iter()
        .map(|(name, value)| {
            let mut pair = name.clone();
            pair.push("=");
            pair.push(value);
            c_string(&pair)
        })
        .collect::<std::io::Result<_>>()?;
    Ok(Exec {
        program: c_string(program.as_os_str())?,
        argv,
        envp,
        cwd: chdir.map(|dir| c_string(dir.as_os_str())).transpose()?,
        stdio,
    })
}

fn c_string(text: &OsStr) -> std::io::Result<CString> {
    CString::new(text.as_bytes()).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "an argument or variable holds a NUL byte",
        )
    })
}

/// The program's path: as given when it holds a `/`, else the first
/// executable file of that name on the child's `PATH` (or the gateway's),
/// as `execvp` would find it.
pub(super) fn resolve(program: &Path, env: &[(OsString, OsString)]) -> std::io::Result<PathBuf> {
    if program.as_os_str().as_bytes().contains(&b'/') {
        return Ok(program.to_path_buf());
    }
    let path = env
        .iter()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.clone())
        .or_else(|| std::env::var_os("PATH"))
        .unwrap_or_else(|| DEFAULT_PATH.into());
    let mut denied = false;
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(program);
        if !candidate.is_file() {
            continue;
        }
        match access(&candidate, AccessFlags::X_OK) {
            Ok(()) => return Ok(candidate),
            Err(_) => denied = true,
        }
    }
    Err(match denied {
        true => std::io::ErrorKind::PermissionDenied.into(),
        false => std::io::ErrorKind::NotFound.into(),
    })
}

/// A launched child until it is reaped.
#[derive(Debug)]
pub struct Launched {
    pid: Pid,
    /// Its status once reaped (asked again, it is answered from here).
    status: Option<ExitStatus>,
}

impl Launched {
    pub(super) fn new(pid: Pid) -> Launched {
        Launched { pid, status: None }
    }

    pub fn id(&self) -> u32 {
        self.pid.as_raw().unsigned_abs()
    }

    /// Its exit status if it has exited (reaping it), without waiting.
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.wait_with(libc::WNOHANG)
    }

    /// Waits for it to exit (blocking).
    #[cfg(test)]
    pub fn wait(&mut self) -> std::io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.wait_with(0)? {
                return Ok(status);
            }
        }
    }

    fn wait_with(&mut self, flags: libc::c_int) -> std::io::Result<Option<ExitStatus>> {
        if let Some(status) = self.status {
            return Ok(Some(status));
        }
        let Some(raw) = super::sys::wait_status(self.pid, flags)? else {
            return Ok(None);
        };
        let status = ExitStatus::from_raw(raw);
        self.status = Some(status);
        Ok(Some(status))
    }
}

/// Reaps `child`, a child of the gateway nothing else waits for (killed,
/// or whose start was given up), in the background (at every SIGCHLD, or
/// every 100 ms), then forgets it as live. Must be called inside the
/// tokio runtime.
pub(super) fn reap_later(mut child: Launched) {
    use tokio::signal::unix::{signal, SignalKind};
    tokio::spawn(async move {
        let mut chld = signal(SignalKind::child()).ok();
        while let Ok(None) = child.try_wait() {
            let wake = async {
                match &mut chld {
                    Some(chld) => {
                        chld.recv().await;
                    }
                    None => std::future::pending().await,
                }
            };
            let _ = tokio::time::timeout(std::time::Duration::from_millis(100), wake).await;
        }
        super::leftovers::forget(child.id());
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(path: &str) -> Vec<(OsString, OsString)> {
        vec![("PATH".into(), path.into())]
    }

    #[test]
    fn a_bare_name_is_found_on_the_childs_path() {
        assert_eq!(
            resolve(Path::new("sh"), &env("/nowhere:/bin")).unwrap(),
            Path::new("/bin/sh")
        );
        assert_eq!(
            resolve(Path::new("./x"), &env("/bin")).unwrap(),
            Path::new("./x"),
            "a path is taken as given"
        );
        let missing = resolve(Path::new("no-such-program-here"), &env("/bin")).unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
    }

    fn spec(script: &str) -> SpawnSpec {
        SpawnSpec {
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
            cwd: "/".into(),
            env: vec![
                ("A".into(), "from-the-spec".into()),
                ("PATH".into(), "/bin:/usr/bin".into()),
            ],
            project: "p".into(),
            max_line: 1,
            confine: Default::default(),
            stderr_log: None,
            template: false,
        }
    }

    /// Launches `spec` with stdout to a pipe; returns the handle and what
    /// the child printed.
    fn run(spec: &SpawnSpec, chdir: Option<&Path>) -> std::io::Result<(Launched, String)> {
        use std::io::Read;
        let (read, write) = nix::unistd::pipe().unwrap();
        let null: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
        let exec = exec_of(spec, chdir, [null.try_clone().unwrap(), write, null])?;
        let pid = super::super::sys::launch(&exec, Default::default())?;
        drop(exec);
        let mut out = String::new();
        std::fs::File::from(read).read_to_string(&mut out).unwrap();
        Ok((Launched::new(pid), out))
    }

    #[test]
    fn a_launched_child_gets_its_environment_directory_and_status() {
        let (mut child, out) =
            run(&spec("echo \"$A $(pwd)\"; exit 3"), Some(Path::new("/tmp"))).unwrap();
        assert_eq!(out, "from-the-spec /tmp\n");
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(3));
        assert_eq!(
            child.try_wait().unwrap(),
            Some(status),
            "remembered once reaped"
        );

        let (mut child, _) = run(&spec("kill -9 $$"), None).unwrap();
        assert_eq!(child.wait().unwrap().signal(), Some(9));
        // A real-time signal, which nix's status decoding does not know.
        let (mut child, _) = run(&spec("kill -s RTMIN+2 $$"), None).unwrap();
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGRTMIN() + 2));
    }

    #[test]
    fn a_failure_before_exec_comes_back_as_the_error() {
        let missing = run(&spec("true"), Some(Path::new("/no/such/directory"))).unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
        let mut not_a_program = spec("true");
        not_a_program.program = "/dev/null".into();
        let denied = run(&not_a_program, None).unwrap_err();
        assert_eq!(denied.kind(), std::io::ErrorKind::PermissionDenied);
    }

    #[test]
    fn argv_and_environment_become_c_strings() {
        let spec = SpawnSpec {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), "exit 3".into()],
            cwd: "/".into(),
            env: vec![("A".into(), "1".into())],
            project: "p".into(),
            max_line: 1,
            confine: Default::default(),
            stderr_log: None,
            template: false,
        };
        let null = || std::fs::File::open("/dev/null").unwrap().into();
        let exec = exec_of(&spec, None, [null(), null(), null()]).unwrap();
        assert_eq!(exec.argv, [c"/bin/sh", c"-c", c"exit 3"]);
        assert_eq!(exec.envp, [c"A=1"]);
        let mut bad = spec.clone();
        bad.args.push("a\0b".into());
        assert!(exec_of(&bad, None, [null(), null(), null()]).is_err());
    }
}
