//! The one table of WebSocket close codes the gateway sends ([`CloseCode`]):
//! each code, what it means and when it is sent. The README's "Close codes"
//! table is [`readme_table`]'s output, and a test fails when they disagree;
//! `corral attach` reads the same table to explain a close.

/// A close code the gateway sends, with its meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseCode {
    Normal,
    GoingAway,
    Protocol,
    Policy,
    TooBig,
    Internal,
    TryAgain,
    Lagged,
    Revoked,
    NoProject,
}

impl CloseCode {
    /// Every code, in the README's order.
    pub const ALL: [CloseCode; 10] = [
        CloseCode::Normal,
        CloseCode::GoingAway,
        CloseCode::Protocol,
        CloseCode::Policy,
        CloseCode::TooBig,
        CloseCode::Internal,
        CloseCode::TryAgain,
        CloseCode::Lagged,
        CloseCode::Revoked,
        CloseCode::NoProject,
    ];

    /// The number on the wire.
    pub const fn code(self) -> u16 {
        match self {
            CloseCode::Normal => 1000,
            CloseCode::GoingAway => 1001,
            CloseCode::Protocol => 1002,
            CloseCode::Policy => 1008,
            CloseCode::TooBig => 1009,
            CloseCode::Internal => 1011,
            CloseCode::TryAgain => 1013,
            CloseCode::Lagged => 4000,
            CloseCode::Revoked => 4001,
            CloseCode::NoProject => 4004,
        }
    }

    /// The code the number stands for, if the gateway sends it.
    pub fn from_code(code: u16) -> Option<CloseCode> {
        CloseCode::ALL.into_iter().find(|c| c.code() == code)
    }

    /// What it means, in a few words.
    pub const fn meaning(self) -> &'static str {
        match self {
            CloseCode::Normal => "normal closure",
            CloseCode::GoingAway => "going away",
            CloseCode::Protocol => "protocol error",
            CloseCode::Policy => "policy violation",
            CloseCode::TooBig => "message too big",
            CloseCode::Internal => "internal error",
            CloseCode::TryAgain => "try again later",
            CloseCode::Lagged => "too slow",
            CloseCode::Revoked => "credential revoked or expired",
            CloseCode::NoProject => "no such project",
        }
    }

    /// When the gateway sends it.
    pub const fn when(self) -> &'static str {
        match self {
            CloseCode::Normal => "the client said it leaves (a `bye`), after the dialect's farewell",
            CloseCode::GoingAway => {
                "the gateway shuts down, or the agent was stopped (idle, evicted, admin stop)"
            }
            CloseCode::Protocol => {
                "invalid framing before authentication, or a hello asking for a protocol version the gateway lacks"
            }
            CloseCode::Policy => {
                "authentication failed, the credential does not cover the project (the same whether it exists), \
                 or the client left too many responses unread"
            }
            CloseCode::TooBig => {
                "more than `--max-hello-bytes` before authentication, or a frame over `--max-frame-bytes`"
            }
            CloseCode::Internal => "the agent could not start",
            CloseCode::TryAgain => {
                "too many agents with none idle, shutting down, too many failed authentications from this address, \
                 the token already holds `--max-connections-per-token` sessions, closed at `--max-connections` \
                 before its hello, or the project's journal is held by an agent on another gateway"
            }
            CloseCode::Lagged => {
                "the client fell out of the replay ring, more bytes waited for it than `--client-buffer-bytes`, \
                 or it held the most when all clients together were over `--total-client-buffer-bytes`"
            }
            CloseCode::Revoked => {
                "the session's token was revoked (`DELETE /v1/tokens/NAME`, on any gateway sharing the state directory) \
                 or its credential expired (a token's `expires`, a JWT's `exp`); reconnect with a valid one"
            }
            CloseCode::NoProject => "no such project (after a valid hello)",
        }
    }
}

/// The README's "Close codes" table, header included.
pub fn readme_table() -> String {
    let mut table = String::from("| code | meaning | when the gateway sends it |\n|---|---|---|\n");
    for code in CloseCode::ALL {
        table.push_str(&format!(
            "| {} | {} | {} |\n",
            code.code(),
            code.meaning(),
            code.when()
        ));
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_read_back() {
        for code in CloseCode::ALL {
            assert_eq!(CloseCode::from_code(code.code()), Some(code));
        }
        assert_eq!(CloseCode::from_code(1006), None);
    }

    /// The README documents the codes from this table: a code added,
    /// removed or reworded here fails until the README says the same.
    #[test]
    fn the_readme_table_is_this_table() {
        let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"));
        let section = readme
            .split("\n#### Close codes\n")
            .nth(1)
            .expect("the README has a \"#### Close codes\" section");
        let in_readme: String = section
            .lines()
            .skip_while(|line| !line.starts_with('|'))
            .take_while(|line| line.starts_with('|'))
            .map(|line| format!("{line}\n"))
            .collect();
        let expected = readme_table();
        assert!(
            in_readme == expected,
            "the README's close-code table differs from gateway/src/ws/close.rs; it should read:\n\n{expected}"
        );
    }

    /// The dashboard explains each close in words: every code the gateway
    /// sends has some there.
    #[test]
    fn the_dashboard_has_words_for_every_code() {
        let js = include_str!("../dashboard/refusal.js");
        for code in CloseCode::ALL {
            assert!(
                js.contains(&format!("  {}: \"", code.code())),
                "refusal.js has no words for {code:?}"
            );
        }
    }
}
