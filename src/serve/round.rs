//! One round of the scheduler, to wait for: what a streamed body waits before it sends
//! the pieces it has, so that the pieces already on their way (an upstream connection
//! hands its body over one chunk at a time, each a round apart) leave in one write.
//!
//! `tokio::task::yield_now` cannot be used for this inside a body: the server may poll
//! the body again at once, in the same round, and a yield's second poll is ready
//! whenever it comes. A [`Round`] knows whether the runtime has really woken it, and
//! [`HoldBack`] is the rule a batching body follows with it. Both rest on [`Noted`], a
//! waker that notes it was woken.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// When a batching body sends what it holds: a poll that took pieces holds the batch back
/// for a round of the scheduler, again while rounds bring more; the batch leaves after a
/// round that brought nothing. A poll within the round (the server may poll again at
/// once) does not end the wait.
#[derive(Default)]
pub struct HoldBack {
    round: Round,
    /// A round was started for the batch held now.
    waiting: bool,
}

impl HoldBack {
    /// Whether the batch is held back, after a poll that took pieces (`grew`) or none;
    /// when it is, `cx`'s task is woken at the end of the round.
    pub fn hold(&mut self, grew: bool, cx: &std::task::Context<'_>) -> bool {
        let in_round = self.waiting && !self.round.passed();
        if grew && !in_round {
            self.round.start(cx);
            self.waiting = true;
        }
        if grew || in_round {
            return true;
        }
        self.waiting = false;
        false
    }

    /// The batch leaves without waiting: it is full, or the body ended. (A round still
    /// running ends with the next one's, when the runtime wakes the deferred wakers
    /// together.)
    pub fn release(&mut self) {
        self.waiting = false;
    }
}

/// A waker that notes it was woken, then wakes the task last registered with it.
pub(super) struct Noted {
    woken: AtomicBool,
    task: futures::task::AtomicWaker,
}

impl Noted {
    /// A waker, noted as woken or not.
    pub(super) fn new(woken: bool) -> Arc<Self> {
        Arc::new(Self {
            woken: AtomicBool::new(woken),
            task: futures::task::AtomicWaker::new(),
        })
    }

    /// The task woken with it.
    pub(super) fn register(&self, waker: &std::task::Waker) {
        self.task.register(waker);
    }

    /// Notes it as woken (without waking anything).
    pub(super) fn note(&self) {
        self.woken.store(true, Ordering::Release);
    }

    /// Whether it was woken since this was last asked; forgets it.
    pub(super) fn take(&self) -> bool {
        self.woken.swap(false, Ordering::AcqRel)
    }

    fn woken(&self) -> bool {
        self.woken.load(Ordering::Acquire)
    }
}

impl std::task::Wake for Noted {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.note();
        self.task.wake();
    }
}

/// One round of the scheduler: its waker is deferred by the runtime until the tasks
/// already woken have run (tokio's `yield_now`), then marks the round passed and wakes
/// the task that started it.
struct Round(Arc<Noted>);

impl Default for Round {
    fn default() -> Self {
        Self(Noted::new(false))
    }
}

impl Round {
    /// Starts a round that ends after the tasks already woken have run; `cx`'s task is
    /// woken then.
    fn start(&self, cx: &std::task::Context<'_>) {
        self.0.take();
        self.0.register(cx.waker());
        let waker = std::task::Waker::from(self.0.clone());
        // A yield's first poll hands its waker to the runtime's deferred list; the
        // future itself is not needed after that.
        let _ = std::pin::pin!(tokio::task::yield_now())
            .poll(&mut std::task::Context::from_waker(&waker));
    }

    /// Whether the round started last has passed.
    fn passed(&self) -> bool {
        self.0.woken()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polled again in the same round, as a server may poll a body, the round has not
    /// passed; it passes when the runtime wakes its deferred waker (after the task woken
    /// before it, as tokio runs them).
    #[tokio::test(flavor = "current_thread")]
    async fn a_round_passes_after_the_tasks_already_woken() {
        let ran = Arc::new(AtomicBool::new(false));
        let other = tokio::spawn({
            let ran = ran.clone();
            async move { ran.store(true, Ordering::Release) }
        });
        let round = Round::default();
        let mut started = false;
        std::future::poll_fn(|cx| {
            if !started {
                round.start(cx);
                started = true;
                // Polled again at once, as a server may: still the same round.
                assert!(!round.passed());
                return std::task::Poll::Pending;
            }
            if round.passed() {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await;
        assert!(
            ran.load(Ordering::Acquire),
            "the round passed before the woken task ran"
        );
        other.await.unwrap();
    }

    /// A batch is held for a round, again while rounds bring more, and leaves after one
    /// that brought nothing; a poll within the round does not end the wait.
    #[tokio::test(flavor = "current_thread")]
    async fn a_batch_is_held_while_rounds_bring_more() {
        use std::task::Poll;
        let mut hold = HoldBack::default();
        let mut seen = Vec::new();
        let polls = std::future::poll_fn(|cx| match seen.len() {
            0 => {
                // Pieces came: held; polled again at once, as a server may: still held.
                seen.push(hold.hold(true, cx));
                seen.push(hold.hold(false, cx));
                Poll::Pending
            }
            // The round passed and brought more: held for another.
            2 => {
                seen.push(hold.hold(true, cx));
                Poll::Pending
            }
            // That round brought nothing: the batch leaves.
            _ => {
                seen.push(hold.hold(false, cx));
                Poll::Ready(())
            }
        });
        tokio::time::timeout(std::time::Duration::from_secs(5), polls)
            .await
            .expect("the end of a round did not wake the task");
        assert_eq!(seen, [true, true, true, false]);
    }
}
