//! Masks secrets in what `/proc/PID/cmdline` and `/proc/PID/environ` show
//! of this process. Those files read the original argument and environment
//! blocks, which `remove_var` does not touch: the token values are
//! overwritten with `*` in place, through `/proc/self/mem` (a process may
//! always write its own memory), so `ps` shows `--token ****…`.

use std::fs::{self, OpenOptions};
use std::io;
use std::ops::Range;
use std::os::unix::fs::FileExt;

/// Overwrites the values of `flags` (`--flag VALUE` or `--flag=VALUE`) in
/// the argument block and of `vars` in the environment block. Returns how
/// many values were masked.
pub fn mask_process_secrets(flags: &[&str], vars: &[&str]) -> io::Result<usize> {
    let stat = fs::read_to_string("/proc/self/stat")?;
    let bounds = block_starts(&stat)
        .ok_or_else(|| io::Error::other("/proc/self/stat has no argument or environment bounds"))?;
    let mut writes: Vec<(u64, usize)> = Vec::new();
    let cmdline = fs::read("/proc/self/cmdline")?;
    for range in flag_values(&cmdline, flags) {
        writes.push((bounds.0 + range.start as u64, range.len()));
    }
    let environ = fs::read("/proc/self/environ")?;
    for range in var_values(&environ, vars) {
        writes.push((bounds.1 + range.start as u64, range.len()));
    }
    if writes.is_empty() {
        return Ok(0);
    }
    let mem = OpenOptions::new().write(true).open("/proc/self/mem")?;
    for &(at, len) in &writes {
        mem.write_all_at(&vec![b'*'; len], at)?;
    }
    Ok(writes.len())
}

/// `arg_start` and `env_start` from `/proc/self/stat` (fields 48 and 50).
fn block_starts(stat: &str) -> Option<(u64, u64)> {
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field n of stat is fields[n - 3] here (pid and comm come first).
    let arg_start = fields.get(45)?.parse().ok()?;
    let env_start = fields.get(47)?.parse().ok()?;
    Some((arg_start, env_start))
}

/// NUL-separated entries of a block, with their byte ranges.
fn entries(block: &[u8]) -> impl Iterator<Item = (Range<usize>, &[u8])> {
    let mut start = 0;
    block.split(|&b| b == 0).map(move |entry| {
        let range = start..start + entry.len();
        start += entry.len() + 1;
        (range, entry)
    })
}

/// Ranges of the values of `flags` in an argument block.
fn flag_values(block: &[u8], flags: &[&str]) -> Vec<Range<usize>> {
    let mut ranges = Vec::new();
    let mut value_next = false;
    for (range, arg) in entries(block) {
        if value_next {
            value_next = false;
            if !arg.is_empty() {
                ranges.push(range);
            }
            continue;
        }
        if arg == b"--" {
            break;
        }
        for flag in flags {
            let flag = flag.as_bytes();
            if arg == flag {
                value_next = true;
            } else if arg.starts_with(flag) && arg.get(flag.len()) == Some(&b'=') {
                let value = range.start + flag.len() + 1..range.end;
                if !value.is_empty() {
                    ranges.push(value);
                }
            }
        }
    }
    ranges
}

/// Ranges of the values of `vars` in an environment block.
fn var_values(block: &[u8], vars: &[&str]) -> Vec<Range<usize>> {
    entries(block)
        .filter_map(|(range, entry)| {
            let eq = entry.iter().position(|&b| b == b'=')?;
            let name = &entry[..eq];
            let value = range.start + eq + 1..range.end;
            (vars.iter().any(|v| v.as_bytes() == name) && !value.is_empty()).then_some(value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masked(block: &[u8], ranges: &[Range<usize>]) -> String {
        let mut out = block.to_vec();
        for r in ranges {
            out[r.clone()].fill(b'*');
        }
        String::from_utf8(out).unwrap().replace('\0', " ")
    }

    #[test]
    fn flag_values_in_both_spellings() {
        let block = b"corral\0serve\0--token\0secret-one\0--admin-token=secret-two\0--token-file\0f\0--\0--token\0child\0";
        let flags = ["--token", "--admin-token"];
        let ranges = flag_values(block, &flags);
        assert_eq!(
            masked(block, &ranges),
            "corral serve --token ********** --admin-token=********** --token-file f -- --token child "
        );
    }

    #[test]
    fn var_values_by_exact_name() {
        let block = b"PATH=/bin\0CORRAL_TOKENS=a,b\0CORRAL_TOKENS_X=keep\0CORRAL_ADMIN_TOKEN=\0";
        let ranges = var_values(block, &["CORRAL_TOKENS", "CORRAL_ADMIN_TOKEN"]);
        assert_eq!(
            masked(block, &ranges),
            "PATH=/bin CORRAL_TOKENS=*** CORRAL_TOKENS_X=keep CORRAL_ADMIN_TOKEN= "
        );
    }

    #[test]
    fn stat_bounds() {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let (args, env) = block_starts(&stat).unwrap();
        assert!(args > 0 && env > args);
        assert_eq!(block_starts("1 (x) S"), None);
    }
}
