//! Egress bytes, paid in the ledger before they move.
//!
//! A grant's request budget bounds how many requests a run makes, not how
//! much they carry: one tunnel could move its whole byte cap on a single
//! request. So every byte through the door — request and response bodies,
//! tunnel bytes both ways — is also paid from the grant's
//! `max_egress_bytes` ([`Operation::Egress`]), chunk by chunk, as it flows
//! and before it is passed on, on the shared ledger (so the budget holds
//! across nodes). A body whose length is declared is paid in one piece
//! before anything moves; one without is paid frame by frame.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use gatehouse_core::{Clock, Reason, RefusalKind};
use gatehouse_ledger::{Ledger, Operation, spend};
use hyper::body::{Body, Frame, SizeHint};

/// Pays one grant's egress bytes.
#[derive(Clone)]
pub struct EgressMeter {
    ledger: Ledger,
    grant_id: Arc<str>,
    clock: Arc<dyn Clock>,
    ledger_required: bool,
}

impl std::fmt::Debug for EgressMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressMeter").field("grant_id", &self.grant_id).finish_non_exhaustive()
    }
}

impl EgressMeter {
    /// A meter for `grant_id` on `ledger`, under `CODEAPI_EGRESS_LEDGER_REQUIRED`.
    pub fn new(ledger: Ledger, grant_id: &str, clock: Arc<dyn Clock>, ledger_required: bool) -> Self {
        Self { ledger, grant_id: grant_id.into(), clock, ledger_required }
    }

    /// Pays `bytes`, or says why they may not move.
    pub async fn pay(&self, bytes: u64) -> Result<(), Reason> {
        if bytes == 0 {
            return Ok(());
        }
        let op = Operation::Egress { bytes };
        spend(&self.ledger, &self.grant_id, &op, self.clock.now(), self.ledger_required).await.map(|_| ())
    }

    /// `body`, each data frame paid before it is yielded. `on_refused` hears
    /// why, once, when a frame could not be paid (the body then ends in an
    /// error, which aborts the message).
    pub fn metered<B>(self, body: B, on_refused: impl FnOnce(Reason) + Send + 'static) -> Metered<B> {
        Metered { inner: body, meter: self, pending: None, on_refused: Some(Box::new(on_refused)) }
    }
}

/// The kind a refusal of bytes at the door is recorded under: a spent
/// budget is `budget_exhausted`, anything else (a revoked grant, a tunnel's
/// opening) the door's `egress_refused`.
pub fn door_refusal_kind(reason: Reason) -> RefusalKind {
    match gatehouse_ledger::refusal_kind(reason) {
        RefusalKind::BudgetExhausted => RefusalKind::BudgetExhausted,
        _ => RefusalKind::EgressRefused,
    }
}

/// The error a metered body ends with.
#[derive(Debug, thiserror::Error)]
#[error("egress refused: {0}")]
pub struct EgressRefused(pub Reason);

type Payment = Pin<Box<dyn Future<Output = Result<(), Reason>> + Send>>;

/// A body whose data frames are paid for as they pass.
pub struct Metered<B> {
    inner: B,
    meter: EgressMeter,
    /// A frame waiting for its payment.
    pending: Option<(Payment, Frame<Bytes>)>,
    on_refused: Option<Box<dyn FnOnce(Reason) + Send>>,
}

impl<B> Body for Metered<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if this.pending.is_none() {
            let frame = match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => frame,
                other => return Poll::Ready(other.map(|r| r.map_err(Into::into))),
            };
            let n = frame.data_ref().map_or(0, Bytes::len);
            if n == 0 {
                return Poll::Ready(Some(Ok(frame)));
            }
            let meter = this.meter.clone();
            this.pending = Some((Box::pin(async move { meter.pay(n as u64).await }), frame));
        }
        let Some((payment, _)) = &mut this.pending else { return Poll::Ready(None) };
        let paid = ready!(payment.as_mut().poll(cx));
        let Some((_, frame)) = this.pending.take() else { return Poll::Ready(None) };
        match paid {
            Ok(()) => Poll::Ready(Some(Ok(frame))),
            Err(reason) => {
                if let Some(tell) = this.on_refused.take() {
                    tell(reason);
                }
                Poll::Ready(Some(Err(Box::new(EgressRefused(reason)))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_core::ManualClock;
    use gatehouse_ledger::{LedgerBackend as _, MemoryLedger, Registration};
    use http_body_util::BodyExt as _;

    const NOW: i64 = 1_800_000_000;

    async fn meter(budget: u64) -> (EgressMeter, Ledger) {
        let ledger = Ledger::Memory(MemoryLedger::new());
        let registration = Registration {
            grant_id: "g".into(),
            exec_id: "e".into(),
            tenant_id: None,
            exp: NOW + 60,
            input_files: vec![],
            read_sessions: vec![],
            output_session_id: None,
            max_upload_bytes: 0,
            max_output_files: 0,
            max_requests: 1,
            max_egress_bytes: budget,
            max_tool_calls: 0,
        };
        ledger.register(&registration).await.unwrap();
        (EgressMeter::new(ledger.clone(), "g", Arc::new(ManualClock::new(NOW)), true), ledger)
    }

    /// A body of data frames of these sizes.
    struct Chunks(std::collections::VecDeque<usize>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.0.pop_front().map(|n| Ok(Frame::data(Bytes::from(vec![b'x'; n])))))
        }
    }

    fn chunks(sizes: &[usize]) -> Chunks {
        Chunks(sizes.iter().copied().collect())
    }

    #[tokio::test]
    async fn frames_pass_while_paid_and_the_first_unpaid_one_ends_the_body() {
        let (meter, ledger) = meter(250).await;
        let refused = Arc::new(std::sync::Mutex::new(Vec::new()));
        let heard = refused.clone();
        let mut body = meter.metered(chunks(&[100, 100, 100, 10]), move |r| heard.lock().unwrap().push(r));
        let mut passed = 0;
        let mut ended_in = None;
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => passed += f.data_ref().map_or(0, Bytes::len),
                Err(e) => {
                    ended_in = Some(e.to_string());
                    break;
                }
            }
        }
        assert_eq!(passed, 200, "the third frame would pass the budget: it never leaves");
        assert_eq!(ended_in.as_deref(), Some("egress refused: budget_egress_bytes_exhausted"));
        assert_eq!(*refused.lock().unwrap(), [Reason::BudgetEgressBytesExhausted]);
        assert_eq!(ledger.get("g").await.unwrap().unwrap().egress_bytes, 200);
    }

    #[tokio::test]
    async fn paying_nothing_is_free_and_an_unknown_grant_fails_closed() {
        let (meter, _) = meter(0).await;
        assert_eq!(meter.pay(0).await, Ok(()));
        assert_eq!(meter.pay(1).await, Err(Reason::BudgetEgressBytesExhausted));
        let unknown = EgressMeter::new(
            Ledger::Memory(MemoryLedger::new()),
            "nope",
            Arc::new(ManualClock::new(NOW)),
            true,
        );
        assert_eq!(unknown.pay(1).await, Err(Reason::GrantUnknown));
    }
}
