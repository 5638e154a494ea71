//! The spawn request the gateway sends to `corral-agent template` (one
//! datagram on a `SOCK_SEQPACKET` socket, the child's descriptors beside it
//! by `SCM_RIGHTS`) and the template's answer. A small binary encoding:
//! argv and environment are bytes (not always UTF-8), and the template's
//! own process never decodes a request (its forked child does), so the
//! format is plain to check: every length is bounded by what is left.

/// Largest request accepted, in bytes (argv, environment and the rest).
pub const MAX_REQUEST: usize = 128 * 1024;
/// Most descriptors a request carries: stdin, stdout, stderr, the
/// working directory, and the cgroups to join.
pub const MAX_FDS: usize = 16;
/// The answer's size: pid then errno, each a little-endian `i32`.
pub const REPLY_LEN: usize = 8;

const MAGIC: &[u8; 4] = b"CTS1";

/// What the template sends once, before any request: it serves this
/// format (a program that does not is not a template, and is not used).
pub const READY: &[u8; 4] = b"CTR1";

/// What a forked child applies to itself and then runs. The descriptors
/// come in this order: stdin, stdout, stderr, the working directory (when
/// `cwd_fd`), then `join` cgroup files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpawnRequest {
    /// argv, `argv[0]` first.
    pub argv: Vec<Vec<u8>>,
    /// The whole environment, `NAME=VALUE`.
    pub env: Vec<Vec<u8>>,
    /// A directory to enter by path, when no descriptor is sent.
    pub cwd: Option<Vec<u8>>,
    /// Whether a working-directory descriptor follows stderr.
    pub cwd_fd: bool,
    /// How many `cgroup.procs` descriptors follow, each written "0".
    pub join: u32,
    /// rlimits to set, soft and hard: (resource, value).
    pub rlimits: Vec<(u32, u64)>,
    /// The account to switch to: uid, gid, supplementary groups.
    pub credentials: Option<(u32, u32, Vec<u32>)>,
    /// The parent-death signal.
    pub parent_death: i32,
}

/// A request that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed spawn request: {0}")]
pub struct Malformed(&'static str);

impl SpawnRequest {
    /// How many descriptors go with the request.
    pub fn fds(&self) -> usize {
        3 + usize::from(self.cwd_fd) + self.join as usize
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(MAGIC);
        put_u32(&mut out, u32::from(self.cwd_fd));
        put_u32(&mut out, self.join);
        out.extend_from_slice(&self.parent_death.to_le_bytes());
        put_u32(&mut out, len32(self.rlimits.len()));
        for &(resource, value) in &self.rlimits {
            put_u32(&mut out, resource);
            out.extend_from_slice(&value.to_le_bytes());
        }
        match &self.credentials {
            None => put_u32(&mut out, 0),
            Some((uid, gid, groups)) => {
                put_u32(&mut out, 1);
                put_u32(&mut out, *uid);
                put_u32(&mut out, *gid);
                put_u32(&mut out, len32(groups.len()));
                for group in groups {
                    put_u32(&mut out, *group);
                }
            }
        }
        match &self.cwd {
            None => put_u32(&mut out, 0),
            Some(dir) => {
                put_u32(&mut out, 1);
                put_bytes(&mut out, dir);
            }
        }
        for list in [&self.argv, &self.env] {
            put_u32(&mut out, len32(list.len()));
            for item in list {
                put_bytes(&mut out, item);
            }
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<SpawnRequest, Malformed> {
        let mut input = Reader(bytes);
        if input.take(4)? != MAGIC {
            return Err(Malformed("not a spawn request"));
        }
        let cwd_fd = match input.u32()? {
            0 => false,
            1 => true,
            _ => return Err(Malformed("bad working-directory flag")),
        };
        let join = input.u32()?;
        if 3 + usize::from(cwd_fd) + join as usize > MAX_FDS {
            return Err(Malformed("too many descriptors"));
        }
        let parent_death = i32::from_le_bytes(input.array()?);
        let rlimits = (0..input.count(12)?)
            .map(|_| Ok((input.u32()?, u64::from_le_bytes(input.array()?))))
            .collect::<Result<_, Malformed>>()?;
        let credentials = match input.u32()? {
            0 => None,
            1 => {
                let (uid, gid) = (input.u32()?, input.u32()?);
                let groups = (0..input.count(4)?)
                    .map(|_| input.u32())
                    .collect::<Result<_, _>>()?;
                Some((uid, gid, groups))
            }
            _ => return Err(Malformed("bad credentials flag")),
        };
        let cwd = match input.u32()? {
            0 => None,
            1 => Some(input.bytes()?),
            _ => return Err(Malformed("bad directory flag")),
        };
        let argv: Vec<Vec<u8>> = (0..input.count(4)?)
            .map(|_| input.bytes())
            .collect::<Result<_, _>>()?;
        let env = (0..input.count(4)?)
            .map(|_| input.bytes())
            .collect::<Result<_, _>>()?;
        if !input.0.is_empty() {
            return Err(Malformed("trailing bytes"));
        }
        if argv.is_empty() {
            return Err(Malformed("no argv"));
        }
        Ok(SpawnRequest {
            argv,
            env,
            cwd,
            cwd_fd,
            join,
            rlimits,
            credentials,
            parent_death,
        })
    }
}

/// What a spare agent (`corral-agent spare`) writes on its stdout once
/// it entered as much of its sandbox as needs no project, before it reads
/// its assignment: nothing else comes before the protocol's first line.
pub const SPARE_READY: &[u8; 4] = b"CSR1";

/// The exit code of a spare agent that refused its assignment, or could
/// not finish its sandbox for it for a reason of its own (its view of the
/// host, its network, a thread): the spare's failure, not the project's.
pub const SPARE_REFUSED_EXIT: i32 = 79;

/// A spare agent's assignment (`corral-agent spare`), the first bytes on
/// its stdin: a little-endian `u32` length, then a [`SpawnRequest`] of
/// which only argv and the environment count. At most [`MAX_REQUEST`]
/// bytes after the length.
pub fn encode_assignment(argv: Vec<Vec<u8>>, env: Vec<Vec<u8>>) -> Vec<u8> {
    let request = SpawnRequest {
        argv,
        env,
        ..SpawnRequest::default()
    }
    .encode();
    let mut out = Vec::with_capacity(4 + request.len());
    put_u32(&mut out, len32(request.len()));
    out.extend_from_slice(&request);
    out
}

/// The template's answer: the child's pid (0 when none was made), and the
/// errno of what failed (0 when the child is running).
pub fn encode_reply(pid: i32, errno: i32) -> [u8; REPLY_LEN] {
    let mut out = [0; REPLY_LEN];
    out[..4].copy_from_slice(&pid.to_le_bytes());
    out[4..].copy_from_slice(&errno.to_le_bytes());
    out
}

/// Reads [`encode_reply`]'s answer.
pub fn decode_reply(bytes: &[u8]) -> Option<(i32, i32)> {
    let bytes: &[u8; REPLY_LEN] = bytes.try_into().ok()?;
    let pid = i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let errno = i32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    Some((pid, errno))
}

fn len32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_u32(out, len32(bytes.len()));
    out.extend_from_slice(bytes);
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], Malformed> {
        if self.0.len() < n {
            return Err(Malformed("truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        self.take(N)?.try_into().map_err(|_| Malformed("truncated"))
    }

    fn u32(&mut self) -> Result<u32, Malformed> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// A count of items each at least `min` bytes long: never more than
    /// what is left could hold, so no huge allocation follows a lie.
    fn count(&mut self, min: usize) -> Result<usize, Malformed> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min) > self.0.len() {
            return Err(Malformed("count beyond the request"));
        }
        Ok(n)
    }

    fn bytes(&mut self) -> Result<Vec<u8>, Malformed> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> SpawnRequest {
        SpawnRequest {
            argv: vec![b"corral-agent".to_vec(), b"rpc".to_vec(), vec![0xff, 0xfe]],
            env: vec![b"A=1".to_vec(), b"B=".to_vec()],
            cwd: Some(b"/srv/p".to_vec()),
            cwd_fd: true,
            join: 2,
            rlimits: vec![(9, 1 << 30), (6, 64)],
            credentials: Some((1000, 1000, vec![1000, 27])),
            parent_death: 9,
        }
    }

    #[test]
    fn a_request_survives_the_round_trip() {
        let request = full();
        assert_eq!(SpawnRequest::decode(&request.encode()), Ok(request.clone()));
        assert_eq!(request.fds(), 6);
        let bare = SpawnRequest {
            argv: vec![b"x".to_vec()],
            ..SpawnRequest::default()
        };
        assert_eq!(SpawnRequest::decode(&bare.encode()), Ok(bare));
    }

    #[test]
    fn every_truncation_is_refused() {
        let bytes = full().encode();
        for len in 0..bytes.len() {
            assert!(SpawnRequest::decode(&bytes[..len]).is_err(), "{len}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            SpawnRequest::decode(&longer),
            Err(Malformed("trailing bytes"))
        );
    }

    #[test]
    fn a_lying_count_allocates_nothing() {
        let mut bytes = SpawnRequest {
            argv: vec![b"x".to_vec()],
            ..SpawnRequest::default()
        }
        .encode();
        // The argv count sits before the last two lists: claim 2^32-1.
        let at = bytes.len() - 4 - 4 - 1 - 4;
        bytes[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            SpawnRequest::decode(&bytes),
            Err(Malformed("count beyond the request"))
        );
    }

    #[test]
    fn too_many_descriptors_and_no_argv_are_refused() {
        let many = SpawnRequest { join: 20, ..full() };
        assert_eq!(
            SpawnRequest::decode(&many.encode()),
            Err(Malformed("too many descriptors"))
        );
        let none = SpawnRequest::default();
        assert_eq!(
            SpawnRequest::decode(&none.encode()),
            Err(Malformed("no argv"))
        );
    }

    #[test]
    fn the_reply_is_pid_then_errno() {
        assert_eq!(decode_reply(&encode_reply(4321, 0)), Some((4321, 0)));
        assert_eq!(decode_reply(&encode_reply(0, 13)), Some((0, 13)));
        assert_eq!(decode_reply(&[0; 7]), None);
    }

    #[test]
    fn an_assignment_is_its_length_then_a_request_with_argv_and_environment() {
        let bytes = encode_assignment(vec![b"corral-agent".to_vec()], vec![b"A=1".to_vec()]);
        let len = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        assert_eq!(len, bytes.len() - 4);
        let request = SpawnRequest::decode(&bytes[4..]).unwrap();
        assert_eq!(request.argv, [b"corral-agent".to_vec()]);
        assert_eq!(request.env, [b"A=1".to_vec()]);
    }
}
