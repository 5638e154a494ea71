//! The project's one session as its clients open it, in a dialect whose
//! clients do ([`OneSession`]; ACP): joining from now (`new`), with the
//! whole conversation first (`load`: pages asked of the child for this
//! client alone, else the replay ring), after a `seq` it saw (`resume`),
//! leaving it (`close`), listing the sessions its identity may open
//! (`list`, read off the hub's loop), and a fresh conversation for
//! everyone (`reset`).
//!
//! A load holds the client's events from its request on (its feed takes
//! them unsent, [`Unicast::Mute`]): the history the child answers with
//! covers them, so its pages go out when the answer arrives, then the
//! load's answer, then the live events after that answer. A child that
//! does not know the history request is asked no more: its loads replay
//! the ring instead.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::{json, Value};

use super::actor::{Hub, Loading};
use super::budget::Outgoing;
use super::client_id::ClientId;
use super::feed::Unicast;
use super::gateway_id::GatewayId;
use crate::access::Identity;
use crate::dialect::rules::{HistoryPage, ListedSession, OneSession};
use crate::dialect::Open;
use crate::offload::{self, Lane};

/// Pages of history one load may ask for; a longer conversation is cut
/// there (each page is bounded by the child, and every frame by the
/// client's outbox bytes).
pub(super) const MAX_HISTORY_PAGES: usize = 256;
/// Sessions in one page of `session/list`.
pub(super) const LIST_PAGE: usize = 100;
/// Project directories read for a listing, at most.
const MAX_LISTED: usize = 100_000;
/// The command a reset is forwarded as (its answer updates the hello).
pub(super) const RESET_COMMAND: &str = "session_reset";

impl Hub {
    fn sessions(&self) -> Option<&'static dyn OneSession> {
        self.settings.dialect.rules().one_session()
    }

    /// A client opens the session (`open`), naming `session`.
    pub(super) fn open_session(
        &mut self,
        client: ClientId,
        id: Value,
        open: Open,
        session: Option<String>,
        seen: (Option<u64>, Option<String>),
        mcp_servers: Vec<crate::mcp::EditorServer>,
    ) {
        let Some(sessions) = self.sessions() else {
            return;
        };
        if open != Open::New {
            let known = session
                .as_deref()
                .is_some_and(|asked| sessions.names_session(&self.hello, &self.project, asked));
            if !known {
                let refusal = sessions.unknown(&id, &self.hello, session.as_deref());
                return self.unicast(client, refusal);
            }
        }
        let Some(entry) = self.clients.get_mut(client) else {
            return;
        };
        if entry.loading {
            let error = "a load of this session is already under way on this connection";
            let reply = self.settings.dialect.rules().request_failed(
                Some(&id),
                "session/load",
                false,
                error,
            );
            return self.unicast(client, reply);
        }
        let joining = !std::mem::replace(&mut entry.in_session, true);
        let hello_resume = entry.resume_after;
        let (mcp, notice) = self.mcp_open(client, &mcp_servers);
        let last = self.feed.last_seq();
        match open {
            Open::New => {
                self.unicast_item(
                    client,
                    Unicast::Mute {
                        after_seq: last,
                        on: false,
                    },
                );
                let answer =
                    sessions.opened(&id, &self.hello, open, self.session_meta(false, &mcp));
                self.unicast(client, answer);
            }
            Open::Resume => {
                let (after, epoch) = seen;
                let other_epoch = epoch.is_some_and(|e| e != self.settings.epoch);
                // Another epoch's seqs say nothing here: all the ring has.
                let after = if other_epoch {
                    Some(0)
                } else {
                    after.or(hello_resume)
                };
                self.unicast_item(
                    client,
                    Unicast::Mute {
                        after_seq: last,
                        on: false,
                    },
                );
                let mut gap = other_epoch;
                if let Some(after) = after {
                    let (to, lost) = self.feed.start_cursor(Some(after));
                    gap |= lost;
                    self.unicast_item(
                        client,
                        Unicast::Rewind {
                            after_seq: last,
                            to,
                        },
                    );
                }
                let answer = sessions.opened(&id, &self.hello, open, self.session_meta(gap, &mcp));
                self.unicast(client, answer);
            }
            Open::Load => {
                self.unicast_item(
                    client,
                    Unicast::Mute {
                        after_seq: last,
                        on: true,
                    },
                );
                self.begin_load(client, id, joining, mcp.clone());
                self.mcp_notice(notice, mcp);
                return;
            }
        }
        self.mcp_notice(notice, mcp);
        if joining {
            self.send_waiting_asks(client);
        }
    }

    /// What the gateway says of the session in an answer opening it.
    fn session_meta(&self, gap: bool, mcp: &Option<Value>) -> Value {
        let mut meta = json!({
            "epoch": self.settings.epoch,
            "last_seq": self.feed.last_seq(),
            "gap": gap,
        });
        if let Some(mcp) = mcp {
            meta["mcp"] = mcp.clone();
        }
        meta
    }

    /// The child's requests still waiting, for a client that just joined.
    fn send_waiting_asks(&mut self, client: ClientId) {
        let asks: Vec<_> = self.asks.waiting().map(|a| a.bytes.clone()).collect();
        for bytes in asks {
            self.unicast(client, bytes);
        }
    }

    /// Asks the child for the first page of history for `client`'s load,
    /// or replays the ring when it cannot give one.
    fn begin_load(&mut self, client: ClientId, id: Value, joining: bool, mcp: Option<Value>) {
        if let Some(entry) = self.clients.get_mut(client) {
            entry.loading = true;
        }
        let loading = Loading {
            client,
            id,
            pages: 0,
            joining,
            mcp,
        };
        self.ask_history(loading, None);
    }

    /// Sends the request for the page after `cursor`.
    fn ask_history(&mut self, loading: Loading, cursor: Option<&str>) {
        let Some(sessions) = self.sessions() else {
            return;
        };
        if self.history_unsupported {
            return self.load_from_ring(loading);
        }
        let gid = self.mint.history();
        let line = sessions.history_request(&self.hello, &gid.to_string(), cursor);
        match self.send_line(line) {
            Ok(()) => {
                self.loading.insert(gid, loading);
            }
            Err(refused) => {
                tracing::debug!(project = %self.project, ?refused, "no history from the agent; replaying the ring");
                self.load_from_ring(loading);
            }
        }
    }

    /// The child's answer to a history request.
    pub(super) fn history_answered(&mut self, line: &[u8], gid: GatewayId) {
        let Some(mut loading) = self.loading.remove(&gid) else {
            tracing::debug!(project = %self.project, %gid, "dropped a history page nobody waits for");
            return;
        };
        let Some(sessions) = self.sessions() else {
            return;
        };
        match sessions.history_page(line) {
            HistoryPage::Updates { frames, next } => {
                for frame in frames {
                    self.unicast(loading.client, frame);
                }
                loading.pages += 1;
                match next {
                    Some(next) if loading.pages < MAX_HISTORY_PAGES => {
                        self.ask_history(loading, Some(&next))
                    }
                    next => {
                        if next.is_some() {
                            tracing::warn!(project = %self.project, "a load stopped after {MAX_HISTORY_PAGES} pages of history");
                        }
                        self.finish_load(loading, None);
                    }
                }
            }
            HistoryPage::Unsupported => {
                tracing::info!(project = %self.project, "the agent has no history request; loads replay the gateway's ring");
                self.history_unsupported = true;
                self.load_from_ring(loading);
            }
            HistoryPage::Failed(why) => {
                tracing::warn!(project = %self.project, "the agent failed a history request ({why}); replaying the ring");
                self.load_from_ring(loading);
            }
        }
    }

    /// A load from what the ring holds (a child without history).
    fn load_from_ring(&mut self, loading: Loading) {
        let last = self.feed.last_seq();
        self.finish_load(
            loading,
            Some(Unicast::Rewind {
                after_seq: last,
                to: 0,
            }),
        );
    }

    /// The end of a load: live events again (after `rewind`, if any),
    /// then the answer, then the child's requests waiting.
    fn finish_load(&mut self, loading: Loading, rewind: Option<Unicast>) {
        let client = loading.client;
        let Some(entry) = self.clients.get_mut(client) else {
            return;
        };
        entry.loading = false;
        let Some(sessions) = self.sessions() else {
            return;
        };
        let last = self.feed.last_seq();
        self.unicast_item(
            client,
            Unicast::Mute {
                after_seq: last,
                on: false,
            },
        );
        if let Some(rewind) = rewind {
            self.unicast_item(client, rewind);
        }
        let answer = sessions.opened(
            &loading.id,
            &self.hello,
            Open::Load,
            self.session_meta(false, &loading.mcp),
        );
        self.unicast(client, answer);
        if loading.joining {
            self.send_waiting_asks(client);
        }
    }

    /// The child is gone: loads waiting for its history replay the ring.
    pub(super) fn loads_dropped(&mut self) {
        for (_, loading) in std::mem::take(&mut self.loading) {
            self.load_from_ring(loading);
        }
    }

    /// A client stops following the session.
    pub(super) fn close_session(&mut self, client: ClientId, id: Value) {
        let Some(sessions) = self.sessions() else {
            return;
        };
        let Some(entry) = self.clients.get_mut(client) else {
            return;
        };
        entry.in_session = false;
        let last = self.feed.last_seq();
        self.unicast_item(
            client,
            Unicast::Mute {
                after_seq: last,
                on: true,
            },
        );
        self.unicast(client, sessions.closed(&id));
    }

    /// A fresh conversation for everyone: the dialect's reset, sent as
    /// this client's request.
    pub(super) fn reset_session(&mut self, client: ClientId, id: Value) {
        let Some(sessions) = self.sessions() else {
            return;
        };
        let frame = sessions.reset(&self.hello);
        self.forward(client, frame, Some(id), RESET_COMMAND.to_string());
    }

    /// The child answered a reset: its hello data follows, and everyone
    /// hears of it.
    pub(super) fn reset_answered(&mut self, line: &[u8]) {
        let Some(sessions) = self.sessions() else {
            return;
        };
        if sessions.reset_done(&mut self.hello, line) {
            let session = sessions.kept(&self.hello);
            tracing::info!(project = %self.project, "the conversation was reset");
            self.emit("session_reset", json!({ "sessionId": session }));
        }
    }

    /// A page of the sessions `client`'s identity may open, after
    /// `cursor`: read off the hub's loop, answered in the client's order
    /// when it is ready.
    pub(super) fn list_sessions(&mut self, client: ClientId, id: Value, cursor: Option<String>) {
        let Some(sessions) = self.sessions() else {
            return;
        };
        let rules = self.settings.dialect.rules();
        if let Some(bad) = cursor
            .as_deref()
            .filter(|c| crate::projects::validate_name(c).is_err())
        {
            let message = format!(
                "invalid cursor {:?}",
                bad.chars().take(80).collect::<String>()
            );
            return self.unicast(client, rules.refusal(Some(&id), "invalid_params", &message));
        }
        let Some(entry) = self.clients.get(client) else {
            return;
        };
        if entry.listing.swap(true, Ordering::AcqRel) {
            let error = "a session list is already being read for this connection";
            let reply = rules.request_failed(Some(&id), "session/list", false, error);
            return self.unicast(client, reply);
        }
        let listing = entry.listing.clone();
        let who = entry.who.clone();
        let (unicast, budget) = (entry.unicast.clone(), entry.budget.clone());
        let root = self.settings.projects_root.clone();
        let dir = self.settings.sessions_dir.clone();
        let feed = self.feed.clone();
        let project = self.project.clone();
        let own = sessions.kept(&self.hello);
        tokio::spawn(async move {
            let listed = offload::run(Lane::Files, move || {
                list_page(&root, &dir, &who, cursor.as_deref(), (&project, own))
            })
            .await;
            let bytes = match listed {
                Ok(Ok((page, next))) => sessions.listed(&id, &page, next.as_deref()),
                _ => {
                    tracing::warn!("cannot read the projects root for a session list");
                    let error = "cannot list the projects now; try again later";
                    rules.request_failed(Some(&id), "session/list", false, error)
                }
            };
            if let Ok(charge) = budget.charge(bytes.len()) {
                let after_seq = feed.last_seq();
                let bytes = Outgoing::new(bytes, charge);
                let _ = unicast.try_send(Unicast::Frame { after_seq, bytes });
            }
            listing.store(false, Ordering::Release);
        });
    }
}

/// The projects under `root` that `who` may open, after `cursor` in name
/// order: one page, and the cursor of the next if there is one. `own` is
/// this hub's project and its running session.
fn list_page(
    root: &Path,
    sessions_dir: &Path,
    who: &Arc<Identity>,
    cursor: Option<&str>,
    own: (&str, Option<String>),
) -> std::io::Result<(Vec<ListedSession>, Option<String>)> {
    let (names, _) = crate::projects::list(root, MAX_LISTED)?;
    let mut visible = names
        .into_iter()
        .filter(|name| cursor.is_none_or(|after| name.as_str() > after))
        .filter(|name| crate::guard::session_role(who, name).is_ok());
    let mut page = Vec::new();
    for name in visible.by_ref().take(LIST_PAGE) {
        let session = match name == own.0 {
            true => own.1.clone(),
            false => None,
        }
        .or_else(|| super::launch::kept_session(sessions_dir, &name));
        let updated = std::fs::symlink_metadata(sessions_dir.join(format!("{name}.jsonl")))
            .and_then(|m| m.modified())
            .ok();
        page.push(ListedSession {
            project: name,
            session,
            updated,
        });
    }
    let next = match visible.next() {
        Some(_) => page.last().map(|last| last.project.clone()),
        None => None,
    };
    Ok((page, next))
}
