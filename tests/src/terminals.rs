//! Terminals inside the sandbox: the shell script a tool runs to try them
//! (`script`, Python's `pty`) and what its output must say (each works, and
//! `/dev/pts` lists none of the host's terminals), plus a terminal of the
//! host's for the test to hold, so the host's `/dev/pts` has an entry.

use std::fs::File;

use crate::prerequisites::{PYTHON3, SCRIPT};

/// Prints `pts-before=[…]` (what `/dev/pts` lists before any terminal is
/// made inside), the `tty` that `script` gives its command, and the exit
/// status of `script -qc true`, `pty.openpty()` and `pty.spawn`.
pub const CHECK: &str = r#"
echo "pts-before=[$(ls -A /dev/pts | tr '\n' ' ')]"
echo "script-tty=$(script -qc tty /dev/null | tr -d '\r')"
script -qc true /dev/null; echo "script=$?"
python3 -c 'import pty; pty.openpty()'; echo "openpty=$?"
python3 -c 'import pty, sys; sys.exit(pty.spawn(["true"]))'; echo "spawn=$?"
"#;

/// Panics unless the programs [`CHECK`] needs are installed.
pub fn require() {
    PYTHON3.require();
    SCRIPT.require();
}

/// Asserts that `output` of [`CHECK`] shows working, private terminals.
pub fn assert_private(output: &str) {
    for line in [
        "pts-before=[ptmx ]",
        "script-tty=/dev/pts/0",
        "script=0",
        "openpty=0",
        "spawn=0",
    ] {
        assert!(
            output.lines().any(|l| l == line),
            "{line:?} not in:\n{output}"
        );
    }
}

/// Opens a terminal on the host (its `/dev/pts/N` exists while the handle
/// lives); `None` where the host offers none.
pub fn host_terminal() -> Option<File> {
    let ptmx = File::options()
        .read(true)
        .write(true)
        .open("/dev/ptmx")
        .ok()?;
    let entries = std::fs::read_dir("/dev/pts").ok()?.count();
    (entries > 1).then_some(ptmx)
}
