//! Input for prompt runs that are under way: steering (taken before the
//! next model call) and follow-ups (taken when the run would otherwise
//! end), and the rules for input that no run can take yet.

use super::Agent;

/// Text sent to the active prompt run while it works. The run takes it at
/// its next step boundary (before its next model call) and, when the model
/// has already answered, goes on for another step instead of ending.
#[derive(Debug, Default)]
pub(crate) struct Steering {
    /// Whether a prompt run can still take steering: set when it starts,
    /// cleared (under this lock) when it decides to end.
    pub open: bool,
    pub pending: Vec<String>,
    /// Input for when the run would otherwise end: the first becomes
    /// steering then, and the run goes on (see [`Agent::queue_input`]).
    pub follow_up: Vec<String>,
    /// A prompt run executes (open or not).
    pub active: bool,
    /// Input was queued while the active run was closed but not yet
    /// over: the run goes on with it rather than leave it for a run that
    /// may never come.
    pub late: bool,
}

/// Where [`Agent::queue_input`] puts text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    /// Taken before the next model call.
    Steering,
    /// Taken, one at a time, when the run would otherwise end.
    FollowUp,
}

impl Agent {
    /// Hands `text` to the active prompt run, which adds it to the
    /// transcript as a user message before its next model call. Gives the
    /// text back when no run can take it (idle, or the run is ending).
    pub fn steer(&self, text: String) -> Result<(), String> {
        let mut steering = self.shared.steering();
        if !steering.open {
            return Err(text);
        }
        steering.pending.push(text);
        Ok(())
    }

    /// Drops steering messages the active run has not taken yet.
    pub fn clear_steering(&self) {
        self.shared.steering().pending.clear();
    }

    /// Queues `text` for the active prompt run, or for the next one when
    /// none can take it (idle, or the run has decided to end): steering is
    /// added before that run's next model call; a follow-up when it would
    /// otherwise end. Input left when a run ends abnormally (aborted,
    /// failed, out of steps) is dropped and reported.
    pub fn queue_input(&self, queue: Queue, text: String) {
        let mut input = self.shared.steering();
        match queue {
            Queue::Steering => input.pending.push(text),
            Queue::FollowUp => input.follow_up.push(text),
        }
        if input.active && !input.open {
            input.late = true;
        }
    }

    /// Queues `text` as a follow-up of the prompt run that executes now;
    /// gives it back when none does (it may have ended a moment ago, before
    /// the front-end saw its end), so the caller starts a run with it
    /// instead of leaving it for a run that may never come.
    pub fn follow_up_active(&self, text: String) -> Result<(), String> {
        let mut input = self.shared.steering();
        if !input.active {
            return Err(text);
        }
        input.follow_up.push(text);
        if !input.open {
            input.late = true;
        }
        Ok(())
    }

    /// The queued input not yet taken: `(steering, follow-ups)`.
    pub fn queued_input(&self) -> (Vec<String>, Vec<String>) {
        let input = self.shared.steering();
        (input.pending.clone(), input.follow_up.clone())
    }

    /// Drops all queued input (steering and follow-ups).
    pub fn discard_input(&self) {
        let mut input = self.shared.steering();
        input.pending.clear();
        input.follow_up.clear();
        input.late = false;
    }
}
