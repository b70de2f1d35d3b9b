//! The application connection: the dedicated QP of application-driven tokens
//! (`hipObjGetRdmaToken`, docs/protocol.md section 6, rule 9.9).

use super::connection::{Connection, Role};
use super::protection::Protection;
use super::state::PairOutcome;
use crate::error::Result;
use crate::token::Token;
use crate::verbs::{BindRange, Device, Window};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The connection and the windows bound on it by tokens not yet released (by rkey). A window
/// dropped before its invalidation was confirmed fences the QP it was bound on.
struct AppState {
    conn: Connection,
    windows: HashMap<u32, Window>,
}

/// The dedicated connection of application-driven tokens. Unlike the pool's connections (owned by
/// value by whoever holds them, no lock), it is not leased: any thread may mint, release or pair
/// through it at any time, so it keeps its own lock, held for one call at a time (a bind or an
/// invalidation: local operations, never a callback). Each token of a paired connection gets its
/// own window, invalidated by `hipObjPutRdmaToken`.
pub struct AppConnection {
    state: Mutex<AppState>,
}

impl AppConnection {
    pub fn new(device: &Arc<Device>, protection: Protection) -> Result<AppConnection> {
        Ok(AppConnection {
            state: Mutex::new(AppState {
                conn: Connection::fresh(device, protection, Role::App)?,
                windows: HashMap::new(),
            }),
        })
    }

    /// The connection and its windows, waiting for another caller. After a panic while they were
    /// held the QP is fenced, so that it is replaced before it is used again.
    fn lock(&self) -> MutexGuard<'_, AppState> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => {
                let mut g = p.into_inner();
                g.conn.fence();
                g
            }
        }
    }

    /// A token for `range` (`registration_rkey` is used as it is under revision-1 protection).
    /// Under windows: a window bound over exactly the range when the connection is paired, rkey 0
    /// otherwise (the server answers 428 and moves nothing).
    pub fn mint(&self, range: &BindRange<'_>, registration_rkey: u32) -> Result<Token> {
        let mut st = self.lock();
        if st.conn.is_fenced() {
            // Rule 5.5; every window bound on the old QP ended with it.
            st.conn.replace()?;
            st.windows.clear();
        }
        if st.conn.protection() == Protection::Registration {
            return Ok(st
                .conn
                .state()
                .token(registration_rkey, range.addr, range.len));
        }
        if !st.conn.is_paired() {
            return Ok(st.conn.state().token(0, range.addr, range.len));
        }
        let mut window = st.conn.alloc_window()?;
        let rkey = st.conn.bind_window(&mut window, range)?;
        st.windows.insert(rkey, window);
        Ok(st.conn.state().token(rkey, range.addr, range.len))
    }

    /// `hipObjPutRdmaToken`: invalidate the window the token names, if it is one of ours. When
    /// that cannot be confirmed the QP is fenced (moved to ERR: every window on it is dead) and
    /// replaced, now or at the next token.
    pub fn release(&self, token: &Token) {
        if token.rkey == 0 {
            return;
        }
        let mut st = self.lock();
        let Some(mut window) = st.windows.remove(&token.rkey) else {
            return;
        };
        st.conn.invalidate_window(&mut window);
        drop(window);
        if st.conn.is_fenced() {
            st.windows.clear();
            if let Err(e) = st.conn.replace() {
                tracing::warn!("cannot replace the application connection's QP yet: {e}");
            }
        }
    }

    /// Apply a `428` reply (rule 5.3). Replacing the QP ends every window bound on it.
    pub fn pair(&self, server: &Token) -> Result<PairOutcome> {
        let mut st = self.lock();
        let outcome = st.conn.pair(server);
        if matches!(outcome, Ok(PairOutcome::Replaced) | Err(_)) {
            st.windows.clear();
        }
        outcome
    }

    /// Windows bound by tokens not yet released (diagnostics and tests).
    pub fn open_windows(&self) -> usize {
        self.lock().windows.len()
    }
}
