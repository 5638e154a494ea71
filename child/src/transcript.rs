//! The transcript as the agent keeps it. The types live in
//! `corral_protocol::transcript` because the session journal stores them
//! verbatim and the gateway's `corral journal` reads that format too.

pub use corral_protocol::transcript::*;
