//! Resource figures of processes from `/proc` (Linux): resident memory and
//! CPU time of a child with its whole process tree (a sandboxed agent is
//! three processes, plus whatever its tools run), and the CPU time of every
//! reaped child.

/// Most processes of one tree that are read (a fork bomb must not make an
/// admin request walk forever).
pub const MAX_TREE_PROCESSES: usize = 4096;

/// Resident set size of `pid`, in bytes.
pub fn resident_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// User plus system CPU time of `pid`, in seconds.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    Some(cpu_ticks(pid, false)? as f64 / ticks_per_second())
}

/// `pid` and its descendants, `pid` first (at most [`MAX_TREE_PROCESSES`]),
/// found through `/proc/PID/task/TID/children`.
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut tree = vec![pid];
    let mut next = 0;
    while next < tree.len() && tree.len() < MAX_TREE_PROCESSES {
        let parent = tree[next];
        next += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{parent}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let path = task.path().join("children");
            let Ok(text) = std::fs::read_to_string(path) else {
                continue;
            };
            for child in text
                .split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok())
            {
                if !tree.contains(&child) && tree.len() < MAX_TREE_PROCESSES {
                    tree.push(child);
                }
            }
        }
    }
    tree
}

/// Resident set size of `pid` and its descendants, in bytes (shared pages
/// count once per process).
pub fn tree_resident_bytes(pid: u32) -> Option<u64> {
    let root = resident_bytes(pid)?;
    let rest: u64 = process_tree(pid)
        .into_iter()
        .skip(1)
        .filter_map(resident_bytes)
        .sum();
    Some(root + rest)
}

/// CPU time of `pid` and its descendants, including the descendants they
/// have already reaped, in seconds.
pub fn tree_cpu_seconds(pid: u32) -> Option<f64> {
    let root = cpu_ticks(pid, true)?;
    let rest: u64 = process_tree(pid)
        .into_iter()
        .skip(1)
        .filter_map(|p| cpu_ticks(p, true))
        .sum();
    Some((root + rest) as f64 / ticks_per_second())
}

/// utime + stime of `pid` in clock ticks, plus cutime + cstime (reaped
/// children) when `reaped` is set.
fn cpu_ticks(pid: u32, reaped: bool) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces and parens).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime, stime, cutime, cstime are fields 14–17 of stat; 12–15 here.
    let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    let own = field(11)? + field(12)?;
    if !reaped {
        return Some(own);
    }
    Some(own + field(13).unwrap_or(0) + field(14).unwrap_or(0))
}

/// CPU time of every child this process has reaped (and their reaped
/// descendants), in seconds.
pub fn reaped_children_cpu_seconds() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    match getrusage(UsageWho::RUSAGE_CHILDREN) {
        Ok(usage) => {
            let seconds = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
            seconds(usage.user_time()) + seconds(usage.system_time())
        }
        Err(_) => 0.0,
    }
}

fn ticks_per_second() -> f64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(ticks)) if ticks > 0 => ticks as f64,
        _ => 100.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let pid = std::process::id();
        assert!(resident_bytes(pid).unwrap() > 1024 * 1024);
        assert!(cpu_seconds(pid).unwrap() >= 0.0);
        assert!(reaped_children_cpu_seconds() >= 0.0);
        assert_eq!(resident_bytes(u32::MAX), None);
    }

    #[test]
    fn tree_includes_descendants() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "sleep 30 & sleep 30 & wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut tree = Vec::new();
        for _ in 0..200 {
            tree = process_tree(pid);
            if tree.len() >= 3 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        assert_eq!(tree[0], pid);
        assert_eq!(tree.len(), 3, "{tree:?}");
        let _ = child.kill();
        let _ = child.wait();
        let me = std::process::id();
        // Both move while other tests run: each is read, neither compared.
        assert!(tree_resident_bytes(me).unwrap() > 0);
        assert!(resident_bytes(me).unwrap() > 0);
        assert!(tree_cpu_seconds(me).unwrap() >= 0.0);
        assert_eq!(tree_cpu_seconds(u32::MAX), None);
    }
}
