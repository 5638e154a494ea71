//! The WebSocket frame format (RFC 6455 §5.2), as far as the gateway
//! needs it before a client is authenticated: parsing a client frame's
//! header, unmasking, and encoding the server's own (unmasked) frames.
//! Pure; after authentication tungstenite does all of this.

/// Opcodes (§5.2).
pub const CONTINUATION: u8 = 0x0;
pub const TEXT: u8 = 0x1;
pub const BINARY: u8 = 0x2;
pub const CLOSE: u8 = 0x8;
pub const PING: u8 = 0x9;
pub const PONG: u8 = 0xA;

/// Longest close reason: a control payload is at most 125 bytes, two of
/// which are the code.
pub const MAX_CLOSE_REASON: usize = 123;

/// A client frame's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub fin: bool,
    pub opcode: u8,
    pub mask: [u8; 4],
    /// Bytes of the header itself.
    pub header_len: usize,
    /// Bytes of payload that follow it.
    pub payload_len: u64,
}

impl Header {
    /// Header plus payload, saturating (a declared length may be absurd).
    pub fn frame_len(&self) -> u64 {
        self.payload_len
            .saturating_add(u64::try_from(self.header_len).unwrap_or(u64::MAX))
    }
}

/// A client frame that breaks the protocol; the reason goes in the close.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ProtocolError(pub &'static str);

/// Parses the header at the start of `buf`: `Ok(None)` when more bytes
/// are needed.
pub fn parse_header(buf: &[u8]) -> Result<Option<Header>, ProtocolError> {
    let [first, second, rest @ ..] = buf else {
        return Ok(None);
    };
    let fin = first & 0x80 != 0;
    if first & 0x70 != 0 {
        return Err(ProtocolError("reserved bits set without an extension"));
    }
    let opcode = first & 0x0F;
    if !matches!(opcode, CONTINUATION | TEXT | BINARY | CLOSE | PING | PONG) {
        return Err(ProtocolError("unknown opcode"));
    }
    if second & 0x80 == 0 {
        return Err(ProtocolError("client frames must be masked"));
    }
    let (payload_len, extra) = match second & 0x7F {
        126 => match rest {
            [a, b, ..] => (u64::from(u16::from_be_bytes([*a, *b])), 2),
            _ => return Ok(None),
        },
        127 => match rest.get(..8) {
            Some(bytes) => {
                let mut be = [0u8; 8];
                be.copy_from_slice(bytes);
                (u64::from_be_bytes(be), 8)
            }
            None => return Ok(None),
        },
        n => (u64::from(n), 0),
    };
    if opcode >= CLOSE && (!fin || payload_len > 125) {
        return Err(ProtocolError("invalid control frame"));
    }
    let Some(key) = rest.get(extra..extra + 4) else {
        return Ok(None);
    };
    let mut mask = [0u8; 4];
    mask.copy_from_slice(key);
    Ok(Some(Header {
        fin,
        opcode,
        mask,
        header_len: 2 + extra + 4,
        payload_len,
    }))
}

/// Unmasks (or masks) `payload` in place.
pub fn apply_mask(payload: &mut [u8], mask: [u8; 4]) {
    for (i, byte) in payload.iter_mut().enumerate() {
        *byte ^= mask[i % 4];
    }
}

/// A complete server frame (final, unmasked).
pub fn encode(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 10);
    out.push(0x80 | opcode);
    match payload.len() {
        n @ 0..=125 => out.push(n as u8),
        n @ 126..=0xFFFF => {
            out.push(126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
    out
}

/// A close frame with `code` and `reason` (cut to fit, on a char boundary).
pub fn close(code: u16, reason: &str) -> Vec<u8> {
    let mut end = reason.len().min(MAX_CLOSE_REASON);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let mut payload = code.to_be_bytes().to_vec();
    payload.extend_from_slice(&reason.as_bytes()[..end]);
    encode(CLOSE, &payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ws::close::CloseCode;

    /// A masked client frame, as a browser would send it.
    fn client_frame(first: u8, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
        let mut frame = encode(first & 0x0F, payload);
        frame[0] = first;
        frame[1] |= 0x80;
        let at = frame.len() - payload.len();
        frame.splice(at..at, mask);
        apply_mask(&mut frame[at + 4..], mask);
        frame
    }

    #[test]
    fn parses_the_three_length_forms_and_unmasks() {
        for len in [0usize, 5, 125, 126, 300, 70_000] {
            let payload = vec![b'x'; len];
            let frame = client_frame(0x81, &payload, [1, 2, 3, 4]);
            let header = parse_header(&frame).unwrap().unwrap();
            assert!(header.fin);
            assert_eq!(header.opcode, TEXT);
            assert_eq!(header.payload_len, len as u64);
            assert_eq!(header.frame_len(), frame.len() as u64);
            let mut body = frame[header.header_len..].to_vec();
            apply_mask(&mut body, header.mask);
            assert_eq!(body, payload);
            // Every strict prefix of the header asks for more.
            for cut in 0..header.header_len {
                assert_eq!(parse_header(&frame[..cut]), Ok(None), "cut {cut}");
            }
        }
    }

    #[test]
    fn a_huge_declared_length_is_read_from_the_header_alone() {
        let mut header = vec![0x81, 0x80 | 127];
        header.extend_from_slice(&((15u64 << 20) - 1).to_be_bytes());
        header.extend_from_slice(&[0, 0, 0, 0]);
        let parsed = parse_header(&header).unwrap().unwrap();
        assert_eq!(parsed.payload_len, (15 << 20) - 1);
    }

    #[test]
    fn refuses_what_a_client_may_not_send() {
        let unmasked = encode(TEXT, b"hi");
        assert!(parse_header(&unmasked).is_err());
        let reserved = client_frame(0xC1, b"hi", [0; 4]);
        assert!(parse_header(&reserved).is_err());
        let unknown = client_frame(0x83, b"hi", [0; 4]);
        assert!(parse_header(&unknown).is_err());
        let fragmented_ping = client_frame(0x09, b"hi", [0; 4]);
        assert!(parse_header(&fragmented_ping).is_err());
    }

    #[test]
    fn close_frames_carry_code_and_a_cut_reason() {
        let frame = close(CloseCode::TooBig.code(), "too big");
        assert_eq!(frame[..4], [0x88, 9, 0x03, 0xF1]);
        assert_eq!(&frame[4..], b"too big");
        let long = "é".repeat(100);
        let frame = close(CloseCode::Policy.code(), &long);
        assert_eq!(frame[1] as usize, 2 + 122);
        assert!(std::str::from_utf8(&frame[4..]).is_ok());
    }
}
