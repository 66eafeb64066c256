//! Scrubbing a credential out of the answer to a request that carried it.
//!
//! An upstream may echo what it was sent: an error page quoting the
//! `Authorization` header, a debug endpoint, a header cut to a window, a
//! header *named* after the token, a reason phrase. Whatever it echoes goes
//! to the run, which must never hold the secret — not whole, and not in
//! pieces it could put together. So the answer to a request that carried a
//! secret passes through three rules, the same on every door path:
//!
//! 1. [`Scrub::answer`]: the answer must be readable as sent. Any content
//!    coding (but `identity`) or transfer coding (but one lone `chunked`),
//!    in any header instance, list position or case, is
//!    `content_encoding_invalid`: a compressed echo hides the secret from
//!    the scrubber and the run inflates it itself. The reason phrase is
//!    dropped (hyper would repeat the upstream's), and header names and
//!    values are scrubbed.
//! 2. Every run of [`MIN_WINDOW`] or more consecutive bytes of a secret form
//!    — a *window*, not only the whole — is replaced, in header names (read
//!    without regard to ASCII case, as names are case-insensitive and
//!    arrive lowercased) and values and across every chunk boundary of the
//!    body. A run that is exactly one secret form becomes that form's
//!    placeholder (Basic credentials come back as the Basic credentials the
//!    sandbox knows); any other run becomes the lease's placeholder.
//! 3. One linear pass: the secret forms are held in a suffix automaton
//!    ([`Automaton`]), which tells, after each byte, the longest suffix of
//!    what was read that is a window of some form. A byte is covered when a
//!    window of at least [`MIN_WINDOW`] bytes ends at or after it and starts
//!    at or before it; covered bytes touching one another make one run. A
//!    window is at most the longest form, so at most that many bytes are
//!    held back between chunks, and each byte costs amortized constant
//!    time whatever the secret.
//!
//! Nothing here prints a secret: `Debug` shows counts, and every copy of a
//! secret form (the automaton's transitions spell it) is zeroized on drop.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use gatehouse_core::Reason;
use http::{HeaderMap, HeaderName, HeaderValue, header};
use hyper::body::{Body, Frame, SizeHint};
use zeroize::Zeroizing;

/// The shortest run of a secret's consecutive bytes that is scrubbed (or
/// the whole form, when a form is shorter). Seven bytes of a random token
/// are a guess the upstream's echo cannot help with; eight would start to
/// spell it.
pub const MIN_WINDOW: usize = 8;

/// The replacements an answer must pass through: each secret form (as it
/// was sent) and the placeholder form the sandbox knows. `Debug` prints
/// only how many pairs there are; the secret forms are zeroized when
/// dropped.
#[derive(Clone, Default)]
pub struct Scrub {
    pairs: Vec<(Zeroizing<Vec<u8>>, Vec<u8>)>,
    /// Built on first use: exact bytes for values and bodies.
    exact: OnceLock<Arc<Automaton>>,
    /// Built on first use: ASCII case folded, for header names.
    folded: OnceLock<Arc<Automaton>>,
}

impl fmt::Debug for Scrub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scrub").field("pairs", &self.pairs.len()).finish()
    }
}

impl Scrub {
    /// Adds a pair. An empty secret form would match everywhere and is never
    /// kept; a secret form already present keeps its first placeholder. The
    /// first pair's placeholder stands in for any partial window.
    pub(crate) fn push(&mut self, secret: &[u8], placeholder: &[u8]) {
        if secret.is_empty() || self.pairs.iter().any(|(s, _)| s.as_slice() == secret) {
            return;
        }
        self.pairs.push((Zeroizing::new(secret.to_vec()), placeholder.to_vec()));
        self.exact = OnceLock::new();
        self.folded = OnceLock::new();
    }

    /// The pairs, for tests.
    #[cfg(test)]
    pub(crate) fn pairs(&self) -> &[(Zeroizing<Vec<u8>>, Vec<u8>)] {
        &self.pairs
    }

    /// Nothing to scrub.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    fn exact(&self) -> &Arc<Automaton> {
        self.exact.get_or_init(|| Arc::new(Automaton::new(&self.pairs, false)))
    }

    fn folded(&self) -> &Arc<Automaton> {
        self.folded.get_or_init(|| {
            // Names arrive lowercased: forms without capitals are read as they are.
            if self.pairs.iter().all(|(secret, _)| !secret.iter().any(u8::is_ascii_uppercase)) {
                return self.exact().clone();
            }
            Arc::new(Automaton::new(&self.pairs, true))
        })
    }

    /// The head of an answer to a request that carried a secret, made safe
    /// to pass on (see the module docs): its codings checked, its reason
    /// phrase dropped, its header names and values scrubbed, its length
    /// dropped (scrubbing the body may change it). Call it before the
    /// hop-by-hop headers are stripped, so the transfer codings are still
    /// there to be read. Nothing to scrub: nothing changes.
    pub fn answer(&self, head: &mut http::response::Parts) -> Result<(), Reason> {
        if self.is_empty() {
            return Ok(());
        }
        codings_are_plain(&head.headers)?;
        head.extensions.remove::<hyper::ext::ReasonPhrase>();
        head.headers.remove(header::CONTENT_LENGTH);
        self.headers(&mut head.headers);
        Ok(())
    }

    /// Scrubs every header name and value. A value that would no longer be
    /// a valid header value is replaced by the placeholder alone (by an
    /// empty value if even that is not valid); a name that would no longer
    /// be a valid name is dropped with its value.
    pub fn headers(&self, headers: &mut HeaderMap) {
        if self.is_empty() {
            return;
        }
        let exact = self.exact();
        let folded = self.folded();
        // Most answers echo nothing: then the map is left as it is.
        let covered = headers
            .iter()
            .any(|(name, value)| folded.covers(name.as_str().as_bytes()) || exact.covers(value.as_bytes()));
        if !covered {
            return;
        }
        let mut rewritten = HeaderMap::with_capacity(headers.len());
        for (name, value) in headers.iter() {
            let name = match folded.scrub_whole(name.as_str().as_bytes()) {
                None => Some(name.clone()),
                Some(scrubbed) => HeaderName::from_bytes(&scrubbed).ok(),
            };
            let Some(name) = name else { continue };
            let value = match exact.scrub_whole(value.as_bytes()) {
                None => value.clone(),
                Some(scrubbed) => HeaderValue::from_bytes(&scrubbed)
                    .or_else(|_| HeaderValue::from_bytes(exact.fallback()))
                    .unwrap_or_else(|_| HeaderValue::from_static("")),
            };
            rewritten.append(name, value);
        }
        *headers = rewritten;
    }

    /// Scrubs a whole body in hand.
    pub fn body(&self, body: &[u8]) -> Bytes {
        if self.is_empty() {
            return Bytes::copy_from_slice(body);
        }
        match self.exact().scrub_whole(body) {
            None => Bytes::copy_from_slice(body),
            Some(scrubbed) => Bytes::from(scrubbed.to_vec()),
        }
    }

    /// A streaming scrubber for a body.
    pub fn stream(&self) -> Scrubber {
        Scrubber::new((!self.is_empty()).then(|| self.exact().clone()))
    }
}

/// Whether an answer's codings leave its bytes as they were sent: no
/// content coding but `identity`, no transfer coding but one lone `chunked`
/// — every header instance, every list element, any case. Anything else
/// (a coding gatehouse would not look inside, a stacked one, a value that
/// is not text) is `content_encoding_invalid`.
pub fn codings_are_plain(headers: &HeaderMap) -> Result<(), Reason> {
    let elements = |name: HeaderName| -> Result<Vec<String>, Reason> {
        let mut out = Vec::new();
        for value in headers.get_all(name) {
            let text = value.to_str().map_err(|_| Reason::ContentEncodingInvalid)?;
            out.extend(text.split(',').map(str::trim).filter(|e| !e.is_empty()).map(str::to_ascii_lowercase));
        }
        Ok(out)
    };
    if elements(header::CONTENT_ENCODING)?.iter().any(|coding| coding != "identity") {
        return Err(Reason::ContentEncodingInvalid);
    }
    match elements(header::TRANSFER_ENCODING)?.as_slice() {
        [] => Ok(()),
        [only] if only == "chunked" => Ok(()),
        _ => Err(Reason::ContentEncodingInvalid),
    }
}

/// No state: the automaton's root.
const ROOT: u32 = 0;
/// No transition.
const NONE: u32 = u32::MAX;

/// A suffix automaton of the secret forms (joined by a separator no input
/// byte reads as), which recognizes every window of every form; and what a
/// run of covered bytes is replaced with.
struct Automaton {
    /// Each input byte's class: 0 for a byte in no form (it ends every
    /// window), 1.. for the bytes the forms hold.
    class: [u16; 256],
    /// Classes per state: the byte classes, 0 and the separator included.
    width: usize,
    /// `next[state * width + class]`: the transitions (they spell the
    /// secrets, so they are wiped on drop).
    next: Zeroizing<Vec<u32>>,
    /// Suffix links.
    link: Vec<u32>,
    /// The longest window each state stands for.
    len: Vec<u32>,
    /// The shortest covered run: [`MIN_WINDOW`], or the shortest form.
    min_window: usize,
    /// The longest form: the most a window can reach back.
    longest: usize,
    /// The forms and their placeholders, for runs that are exactly a form.
    pairs: Vec<(Zeroizing<Vec<u8>>, Vec<u8>)>,
    /// Forms and input compared without regard to ASCII case.
    fold_case: bool,
}

impl Automaton {
    fn new(pairs: &[(Zeroizing<Vec<u8>>, Vec<u8>)], fold_case: bool) -> Self {
        let fold = |b: u8| if fold_case { b.to_ascii_lowercase() } else { b };
        let pairs: Vec<(Zeroizing<Vec<u8>>, Vec<u8>)> = pairs
            .iter()
            .map(|(secret, placeholder)| {
                (Zeroizing::new(secret.iter().map(|&b| fold(b)).collect()), placeholder.clone())
            })
            .collect();
        let mut class = [0u16; 256];
        let mut classes: u16 = 1;
        for (secret, _) in &pairs {
            for &b in secret.iter() {
                if class[usize::from(b)] == 0 {
                    class[usize::from(b)] = classes;
                    classes += 1;
                }
            }
        }
        if fold_case {
            for upper in b'A'..=b'Z' {
                class[usize::from(upper)] = class[usize::from(upper.to_ascii_lowercase())];
            }
        }
        // The separator's class is one past every byte class: no input byte
        // reads as it, so no window spans two forms.
        let separator = usize::from(classes);
        let width = separator + 1;
        let total: usize = pairs.iter().map(|(s, _)| s.len() + 1).sum();
        let mut automaton = Self {
            class,
            width,
            next: Zeroizing::new(Vec::with_capacity(2 * total * width)),
            link: Vec::with_capacity(2 * total),
            len: Vec::with_capacity(2 * total),
            min_window: pairs.iter().map(|(s, _)| s.len()).min().unwrap_or(1).clamp(1, MIN_WINDOW),
            longest: pairs.iter().map(|(s, _)| s.len()).max().unwrap_or(0),
            pairs: Vec::new(),
            fold_case,
        };
        let root = automaton.state(0, NONE);
        let mut last = root;
        for (secret, _) in &pairs {
            for &b in secret.iter() {
                last = automaton.extend(last, usize::from(automaton.class[usize::from(b)]));
            }
            last = automaton.extend(last, separator);
        }
        automaton.pairs = pairs;
        automaton
    }

    fn state(&mut self, len: u32, link: u32) -> u32 {
        let id = u32::try_from(self.len.len()).unwrap_or(NONE);
        self.len.push(len);
        self.link.push(link);
        self.next.extend(std::iter::repeat_n(NONE, self.width));
        id
    }

    fn at(&self, state: u32, class: usize) -> u32 {
        self.next.get(state as usize * self.width + class).copied().unwrap_or(NONE)
    }

    fn set(&mut self, state: u32, class: usize, to: u32) {
        if let Some(slot) = self.next.get_mut(state as usize * self.width + class) {
            *slot = to;
        }
    }

    fn len_of(&self, state: u32) -> u32 {
        self.len.get(state as usize).copied().unwrap_or(0)
    }

    fn link_of(&self, state: u32) -> u32 {
        self.link.get(state as usize).copied().unwrap_or(NONE)
    }

    /// The standard online construction (Blumer et al.): one state for the
    /// new prefix, and a clone where an existing state stood for windows of
    /// two lengths.
    fn extend(&mut self, last: u32, class: usize) -> u32 {
        let current = self.state(self.len_of(last) + 1, NONE);
        let mut p = last;
        while p != NONE && self.at(p, class) == NONE {
            self.set(p, class, current);
            p = self.link_of(p);
        }
        if p == NONE {
            self.link[current as usize] = ROOT;
            return current;
        }
        let q = self.at(p, class);
        if self.len_of(p) + 1 == self.len_of(q) {
            self.link[current as usize] = q;
            return current;
        }
        let clone = self.state(self.len_of(p) + 1, self.link_of(q));
        for c in 0..self.width {
            let to = self.at(q, c);
            self.set(clone, c, to);
        }
        while p != NONE && self.at(p, class) == q {
            self.set(p, class, clone);
            p = self.link_of(p);
        }
        self.link[q as usize] = clone;
        self.link[current as usize] = clone;
        current
    }

    /// From `state`, having matched `len` bytes, read `byte`: the new state
    /// and the length of the longest window the input now ends with.
    fn step(&self, mut state: u32, mut len: u32, byte: u8) -> (u32, u32) {
        let class = usize::from(self.class[usize::from(byte)]);
        if class == 0 {
            return (ROOT, 0);
        }
        loop {
            let to = self.at(state, class);
            if to != NONE {
                return (to, len + 1);
            }
            if state == ROOT {
                return (ROOT, 0);
            }
            state = self.link_of(state);
            len = self.len_of(state);
        }
    }

    /// What a run of covered bytes becomes: its form's placeholder when it
    /// is exactly one form, otherwise the first (the lease's) placeholder.
    fn replacement(&self, run: &[u8]) -> &[u8] {
        let same =
            |secret: &[u8]| if self.fold_case { run.eq_ignore_ascii_case(secret) } else { run == secret };
        self.pairs.iter().find(|(secret, _)| same(secret)).map_or(self.fallback(), |(_, p)| p)
    }

    fn fallback(&self) -> &[u8] {
        self.pairs.first().map_or(&[][..], |(_, p)| p.as_slice())
    }

    /// Whether any byte of `input` is in a window of a form.
    fn covers(&self, input: &[u8]) -> bool {
        let mut state = ROOT;
        let mut len = 0;
        input.iter().any(|&byte| {
            (state, len) = self.step(state, len, byte);
            len as usize >= self.min_window
        })
    }

    /// `input` scrubbed, or `None` when nothing in it is covered.
    fn scrub_whole(self: &Arc<Self>, input: &[u8]) -> Option<Zeroizing<Vec<u8>>> {
        if !self.covers(input) {
            return None;
        }
        let mut scrubber = Scrubber::new(Some(self.clone()));
        let mut out = Zeroizing::new(scrubber.push(input).to_vec());
        out.extend_from_slice(&scrubber.finish());
        Some(out)
    }
}

/// A run of covered bytes: `[start, end)` in stream offsets.
#[derive(Clone, Copy, Debug)]
struct Run {
    start: u64,
    end: u64,
    /// Its placeholder has been written (it outgrew every form, so it can
    /// be no form exactly); what it still covers is dropped.
    written: bool,
}

/// Replaces windows of secret forms in a body that arrives in chunks.
///
/// The output does not depend on how the input is cut: it equals scrubbing
/// the whole body at once. Between chunks it holds back at most the longest
/// form's length (what a window ending later could still cover), emitted by
/// [`Scrubber::finish`].
pub struct Scrubber {
    automaton: Option<Arc<Automaton>>,
    state: u32,
    matched: u32,
    /// The stream's bytes from offset `held_at` on.
    held: Zeroizing<Vec<u8>>,
    held_at: u64,
    /// Every byte before this offset has been written out or replaced.
    emitted: u64,
    /// Bytes pushed.
    seen: u64,
    /// Runs not yet passed, ascending; only the last may still grow.
    runs: VecDeque<Run>,
}

impl fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scrubber")
            .field("pairs", &self.automaton.as_ref().map_or(0, |a| a.pairs.len()))
            .field("held", &(self.seen - self.emitted))
            .finish()
    }
}

impl Scrubber {
    fn new(automaton: Option<Arc<Automaton>>) -> Self {
        Self {
            automaton,
            state: ROOT,
            matched: 0,
            held: Zeroizing::new(Vec::new()),
            held_at: 0,
            emitted: 0,
            seen: 0,
            runs: VecDeque::new(),
        }
    }

    /// Reads the next chunk; returns what can be passed on now.
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        let Some(automaton) = self.automaton.clone() else {
            return Bytes::copy_from_slice(chunk);
        };
        let mut out = Vec::with_capacity(chunk.len() + self.held.len());
        self.held.extend_from_slice(chunk);
        for &byte in chunk {
            (self.state, self.matched) = automaton.step(self.state, self.matched, byte);
            self.seen += 1;
            if self.matched as usize >= automaton.min_window {
                let start = self.seen - u64::from(self.matched);
                match self.runs.back_mut() {
                    Some(run) if start <= run.end => run.end = self.seen,
                    _ => self.runs.push_back(Run { start, end: self.seen, written: false }),
                }
            }
        }
        // Once per chunk: what no later window can reach is decided now.
        self.decide(&automaton, &mut out, false);
        let done =
            usize::try_from(self.emitted - self.held_at).unwrap_or(self.held.len()).min(self.held.len());
        self.held.drain(..done);
        self.held_at = self.emitted;
        out.into()
    }

    /// Ends the stream: returns the bytes still held, scrubbed.
    pub fn finish(mut self) -> Bytes {
        let Some(automaton) = self.automaton.clone() else {
            return Bytes::new();
        };
        let mut out = Vec::with_capacity(self.held.len());
        self.decide(&automaton, &mut out, true);
        out.into()
    }

    /// Writes out what is decided: bytes no window can reach any more, and
    /// runs no window can extend any more (or, at the end, everything).
    fn decide(&mut self, automaton: &Automaton, out: &mut Vec<u8>, at_end: bool) {
        let longest = automaton.longest as u64;
        // A window found later starts at or after this offset.
        let reach = if at_end { u64::MAX } else { (self.seen + 1).saturating_sub(longest) };
        while self.emitted < self.seen {
            let more_runs = self.runs.len() > 1;
            let Some(run) = self.runs.front_mut().filter(|run| run.start <= self.emitted) else {
                // Plain bytes, up to the next run or as far as no window reaches.
                let next_run = self.runs.front().map_or(u64::MAX, |run| run.start);
                let upto = self.seen.min(reach).min(next_run);
                if upto <= self.emitted {
                    return;
                }
                out.extend_from_slice(self.held_range(self.emitted, upto));
                self.emitted = upto;
                continue;
            };
            // Only the last run can grow, and only by a window reaching it.
            let closed = more_runs || run.end < reach;
            let run = *run;
            if !run.written {
                if closed {
                    out.extend_from_slice(automaton.replacement(self.held_range(run.start, run.end)));
                } else if run.end - run.start > longest {
                    // Longer than any form: its placeholder is known now.
                    out.extend_from_slice(automaton.fallback());
                } else {
                    return;
                }
                if let Some(front) = self.runs.front_mut() {
                    front.written = true;
                }
            }
            self.emitted = self.emitted.max(run.end);
            if !closed {
                return;
            }
            self.runs.pop_front();
        }
    }

    /// The held bytes `[from, to)` (stream offsets).
    fn held_range(&self, from: u64, to: u64) -> &[u8] {
        let offset = |at: u64| usize::try_from(at.saturating_sub(self.held_at)).unwrap_or(usize::MAX);
        self.held.get(offset(from)..offset(to)).unwrap_or_default()
    }
}

pin_project_lite::pin_project! {
    /// A response body with every window of a secret form scrubbed out of
    /// its data, by a [`Scrubber`] whose held-back tail is emitted at the
    /// end of the stream. Trailers are dropped: they are rarely used, and
    /// scrubbing them would need a second pass the body has no place for.
    /// The size hint is unknown, as scrubbing can change the length.
    pub struct ScrubBody<B> {
        #[pin]
        inner: B,
        // `None` once the stream has ended (or failed).
        scrubber: Option<Scrubber>,
    }
}

impl<B> ScrubBody<B> {
    /// `body`, scrubbed of `scrub`'s secret forms.
    pub fn new(body: B, scrub: &Scrub) -> Self {
        Self { inner: body, scrubber: Some(scrub.stream()) }
    }
}

/// Not the inner body: a buffered one would print the very bytes being
/// scrubbed.
impl<B> fmt::Debug for ScrubBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScrubBody").field("scrubber", &self.scrubber).finish_non_exhaustive()
    }
}

impl<B> Body for ScrubBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        loop {
            let Some(scrubber) = this.scrubber.as_mut() else { return Poll::Ready(None) };
            match ready!(this.inner.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else { continue };
                    let out = scrubber.push(&data);
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(out))));
                    }
                }
                Some(Err(error)) => {
                    *this.scrubber = None;
                    return Poll::Ready(Some(Err(error)));
                }
                None => {
                    let tail = this.scrubber.take().map(Scrubber::finish).unwrap_or_default();
                    return Poll::Ready((!tail.is_empty()).then(|| Ok(Frame::data(tail))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.scrubber.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// Bodies and scrubbers for tests, shared with [`crate::inject`]'s.
#[cfg(test)]
pub(crate) mod testing {
    use std::collections::VecDeque;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

    use bytes::Bytes;
    use http::{HeaderMap, HeaderValue};
    use hyper::body::{Body, Frame, SizeHint};

    use super::Scrub;

    /// A body of these frames, as an upstream would deliver them.
    pub(crate) struct Frames(VecDeque<Frame<Bytes>>, u64);

    impl Body for Frames {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.0.pop_front().map(Ok))
        }
        fn size_hint(&self) -> SizeHint {
            SizeHint::with_exact(self.1)
        }
    }

    /// `pieces` as data frames, then (`trailers`) a trailer echoing a token.
    pub(crate) fn frames(pieces: &[&[u8]], trailers: bool) -> Frames {
        let mut all: VecDeque<Frame<Bytes>> =
            pieces.iter().map(|p| Frame::data(Bytes::copy_from_slice(p))).collect();
        if trailers {
            let mut echo = HeaderMap::new();
            echo.insert("x-echo", HeaderValue::from_static("ghp_s3cr3t_t0ken_value"));
            all.push_back(Frame::trailers(echo));
        }
        let len = pieces.iter().map(|p| p.len() as u64).sum();
        Frames(all, len)
    }

    /// Every data frame of a body that is always ready (no trailer may come out).
    pub(crate) fn drain<B: Body<Data = Bytes> + Unpin>(mut body: B) -> Vec<u8> {
        let mut cx = Context::from_waker(Waker::noop());
        let mut out = Vec::new();
        loop {
            match Pin::new(&mut body).poll_frame(&mut cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => out.extend_from_slice(&data),
                    Err(_) => panic!("a trailer came through"),
                },
                Poll::Ready(None) => return out,
                Poll::Ready(Some(Err(_))) => panic!("the body failed"),
                Poll::Pending => panic!("the test body is always ready"),
            }
        }
    }

    /// A scrub of these (secret form, placeholder) pairs.
    pub(crate) fn scrub_of(pairs: &[(&[u8], &[u8])]) -> Scrub {
        let mut scrub = Scrub::default();
        for (secret, placeholder) in pairs {
            scrub.push(secret, placeholder);
        }
        scrub
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{drain, frames, scrub_of};
    use super::*;
    use proptest::prelude::*;

    const SECRET: &[u8] = b"ghp_0123456789abcdefghijABCDEFGHIJ";
    const P: &[u8] = b"gatehouse_lease_00000000000000000000000000000001";

    /// Everything a scrubber yields for a body cut into `pieces`, checking
    /// it never holds more than the longest form.
    fn in_pieces(scrub: &Scrub, pieces: &[&[u8]]) -> Vec<u8> {
        let longest = scrub.pairs.iter().map(|(s, _)| s.len()).max().unwrap_or(0) as u64;
        let mut scrubber = scrub.stream();
        let mut out = Vec::new();
        for piece in pieces {
            out.extend_from_slice(&scrubber.push(piece));
            assert!(scrubber.seen - scrubber.emitted <= 2 * longest, "held too much");
        }
        out.extend_from_slice(&scrubber.finish());
        out
    }

    /// The reference: mark every byte inside any occurrence (of at least
    /// the window length) of any window of any form, by brute force; each
    /// maximal marked run becomes the form it equals, or the first
    /// placeholder.
    fn reference(body: &[u8], pairs: &[(&[u8], &[u8])]) -> Vec<u8> {
        let min = pairs.iter().map(|(s, _)| s.len()).min().unwrap_or(1).clamp(1, MIN_WINDOW);
        let mut covered = vec![false; body.len()];
        for (secret, _) in pairs {
            for start in 0..body.len() {
                for end in start + min..=body.len() {
                    let window = &body[start..end];
                    if secret.windows(window.len()).any(|w| w == window) {
                        covered[start..end].iter_mut().for_each(|c| *c = true);
                    }
                }
            }
        }
        let mut out = Vec::new();
        let mut i = 0;
        while i < body.len() {
            if !covered[i] {
                out.push(body[i]);
                i += 1;
                continue;
            }
            let end = (i..body.len()).find(|&j| !covered[j]).unwrap_or(body.len());
            let run = &body[i..end];
            let exact = pairs.iter().find(|(s, _)| *s == run).map(|(_, p)| *p);
            out.extend_from_slice(exact.unwrap_or(pairs[0].1));
            i = end;
        }
        out
    }

    #[test]
    fn every_window_of_eight_bytes_or_more_is_scrubbed_and_seven_pass() {
        let scrub = scrub_of(&[(SECRET, P)]);
        // A prefix, a suffix and a middle piece, each just long enough.
        for (from, to) in
            [(0, 8), (SECRET.len() - 8, SECRET.len()), (5, 13), (0, SECRET.len() - 1), (1, SECRET.len())]
        {
            let body = [b"echo: [".as_slice(), &SECRET[from..to], b"]"].concat();
            let scrubbed = in_pieces(&scrub, &[&body]);
            assert_eq!(scrubbed, [b"echo: [".as_slice(), P, b"]"].concat(), "{from}..{to}");
        }
        // Seven bytes are a guess the echo cannot help with.
        let seven = [b"x".as_slice(), &SECRET[3..10], b"y"].concat();
        assert_eq!(in_pieces(&scrub, &[&seven]), seven);
        // The whole secret, twice with text between, and overlapping windows.
        let body = [SECRET, b" and ", SECRET, &SECRET[..12], &SECRET[6..20]].concat();
        assert_eq!(in_pieces(&scrub, &[&body]), [P, b" and ", P].concat());
    }

    #[test]
    fn a_window_sliding_one_byte_at_a_time_never_returns_a_byte_of_the_secret() {
        // The attack: an upstream echoing a header cut to a window, the
        // padding moved a byte at a time. Nothing of eight or more comes back.
        let scrub = scrub_of(&[(SECRET, P)]);
        for pad in 0..40 {
            let header = [vec![b'.'; pad].as_slice(), SECRET].concat();
            for cut in 1..=header.len() {
                let echoed = &header[..cut];
                let back = in_pieces(&scrub, &[echoed]);
                for window in SECRET.windows(MIN_WINDOW) {
                    assert!(!back.windows(MIN_WINDOW).any(|w| w == window), "pad {pad} cut {cut}");
                }
            }
        }
    }

    #[test]
    fn exact_forms_become_their_own_placeholders_and_partial_ones_the_leases() {
        let basic_sent = b"eC1hY2Nlc3MtdG9rZW46Z2hwXzAxMjM0NTY3ODk=".as_slice();
        let basic_known = b"eC1hY2Nlc3MtdG9rZW46Z2F0ZWhvdXNlX2xlYXNl".as_slice();
        let scrub = scrub_of(&[(SECRET, P), (basic_sent, basic_known)]);
        let body =
            [b"Basic ".as_slice(), basic_sent, b"; token ", SECRET, b"; cut ", &basic_sent[20..34]].concat();
        let expected = [b"Basic ".as_slice(), basic_known, b"; token ", P, b"; cut ", P].concat();
        for piece in [1, 2, 3, 7, 64, body.len()] {
            let pieces: Vec<&[u8]> = body.chunks(piece).collect();
            assert_eq!(in_pieces(&scrub, &pieces), expected, "pieces of {piece}");
        }
    }

    #[test]
    fn a_run_longer_than_any_form_is_one_placeholder_and_memory_stays_flat() {
        let scrub = scrub_of(&[(b"aaaaaaaaaa", b"P")]);
        let body = vec![b'a'; 1 << 16];
        let pieces: Vec<&[u8]> = body.chunks(100).collect();
        assert_eq!(in_pieces(&scrub, &pieces), b"P");
        assert_eq!(in_pieces(&scrub, &[b"xx", &body[..5000], b"yy"]), b"xxPyy");
    }

    #[test]
    fn a_short_secret_is_scrubbed_whole() {
        let scrub = scrub_of(&[(b"abc", b"P")]);
        assert_eq!(in_pieces(&scrub, &[b"xabcx ab abcabc"]), b"xPx ab P");
    }

    #[test]
    fn the_answer_head_loses_its_reason_phrase_and_every_echo() {
        let scrub = scrub_of(&[(SECRET, P)]);
        let mut response = http::Response::new(());
        *response.status_mut() = http::StatusCode::UNAUTHORIZED;
        response.extensions_mut().insert(hyper::ext::ReasonPhrase::from_static(b"bad token ghp_0123456789"));
        let text = std::str::from_utf8(SECRET).unwrap();
        let headers = response.headers_mut();
        headers.insert("content-length", HeaderValue::from_static("12"));
        headers.insert("x-echo", HeaderValue::from_str(&format!("Bearer {}", &text[..20])).unwrap());
        // Header names arrive lowercased: they are read without regard to case.
        headers.insert(
            HeaderName::from_bytes(&SECRET.to_ascii_lowercase()).unwrap(),
            HeaderValue::from_static("1"),
        );
        headers.insert("content-type", HeaderValue::from_static("text/plain"));
        let (mut head, ()) = response.into_parts();
        scrub.answer(&mut head).unwrap();
        assert!(head.extensions.get::<hyper::ext::ReasonPhrase>().is_none());
        assert_eq!(head.status, http::StatusCode::UNAUTHORIZED);
        let p = std::str::from_utf8(P).unwrap();
        let mut names: Vec<String> = head.headers.keys().map(|n| n.as_str().to_owned()).collect();
        names.sort();
        assert_eq!(names, ["content-type", p, "x-echo"]);
        assert_eq!(head.headers["x-echo"], format!("Bearer {p}").as_str());
        // Nothing to scrub: the head stays as it came.
        let mut plain = http::Response::new(());
        plain.extensions_mut().insert(hyper::ext::ReasonPhrase::from_static(b"Fine"));
        let (mut head, ()) = plain.into_parts();
        Scrub::default().answer(&mut head).unwrap();
        assert!(head.extensions.get::<hyper::ext::ReasonPhrase>().is_some());
    }

    #[test]
    fn any_coding_but_identity_or_a_lone_chunked_is_refused() {
        let with = |pairs: &[(&str, &str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.append(
                    HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    HeaderValue::from_str(value).unwrap(),
                );
            }
            codings_are_plain(&headers)
        };
        let refused = Err(Reason::ContentEncodingInvalid);
        assert_eq!(with(&[]), Ok(()));
        assert_eq!(with(&[("content-encoding", "identity"), ("transfer-encoding", "chunked")]), Ok(()));
        assert_eq!(
            with(&[("content-encoding", "Identity, ,identity"), ("transfer-encoding", "CHUNKED")]),
            Ok(())
        );
        for bad in [
            vec![("content-encoding", "identity"), ("content-encoding", "gzip")],
            vec![("content-encoding", "identity, GZip")],
            vec![("content-encoding", "br")],
            vec![("transfer-encoding", "gzip, chunked")],
            vec![("transfer-encoding", "gzip"), ("transfer-encoding", "chunked")],
            vec![("transfer-encoding", "chunked, chunked")],
            vec![("transfer-encoding", "identity")],
            vec![("transfer-encoding", "chunked;ext=1")],
        ] {
            assert_eq!(with(&bad), refused, "{bad:?}");
        }
        let mut opaque = HeaderMap::new();
        opaque.insert("content-encoding", HeaderValue::from_bytes(b"gz\xffip").unwrap());
        assert_eq!(codings_are_plain(&opaque), refused);
    }

    #[test]
    fn a_scrubbed_body_drops_trailers_and_knows_no_size() {
        let scrub = scrub_of(&[(b"secret", b"P")]);
        let body = ScrubBody::new(frames(&[b"a sec", b"ret", b"!"], true), &scrub);
        assert_eq!(body.size_hint().exact(), None);
        assert!(!body.is_end_stream());
        assert_eq!(drain(body), b"a P!");
        // The held-back tail comes out at the end.
        assert_eq!(drain(ScrubBody::new(frames(&[b"a sec"], false), &scrub)), b"a sec");
        assert_eq!(drain(ScrubBody::new(frames(&[], false), &scrub)), b"");
        // Nothing to scrub: the body passes as it is.
        assert_eq!(drain(ScrubBody::new(frames(&[b"a sec", b"ret"], false), &Scrub::default())), b"a secret");
    }

    #[test]
    fn a_scrubbed_value_that_is_no_longer_a_header_value_becomes_the_placeholder() {
        let mut answer = HeaderMap::new();
        answer.insert("x-a", HeaderValue::from_static("left secret right"));
        scrub_of(&[(b"secret", b"bad\nplaceholder")]).headers(&mut answer);
        assert_eq!(answer["x-a"], "");
    }

    #[test]
    fn nothing_prints_a_secret() {
        let scrub = scrub_of(&[(SECRET, P)]);
        let mut scrubber = scrub.stream();
        scrubber.push(&SECRET[..10]);
        let printed =
            format!("{scrub:?} {scrubber:?} {:?}", ScrubBody::new(frames(&[SECRET], false), &scrub));
        assert_eq!(
            printed,
            "Scrub { pairs: 1 } Scrubber { pairs: 1, held: 10 } ScrubBody { scrubber: Some(Scrubber { pairs: 1, held: 0 }), .. }"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn the_scrubber_equals_the_whole_buffer_reference_however_it_is_cut(
            forms in prop::collection::vec(prop::collection::vec(prop::sample::select(b"abc".to_vec()), 1..12), 1..4),
            body in prop::collection::vec(prop::sample::select(b"aabcx".to_vec()), 0..120),
            cuts in prop::collection::vec(0usize..120, 0..16),
        ) {
            let placeholders: Vec<Vec<u8>> = (0..forms.len()).map(|i| format!("<{i}>").into_bytes()).collect();
            let pairs: Vec<(&[u8], &[u8])> = forms.iter().zip(&placeholders).map(|(f, p)| (f.as_slice(), p.as_slice())).collect();
            // A repeated form keeps its first placeholder, as `push` does.
            let mut unique: Vec<(&[u8], &[u8])> = Vec::new();
            for pair in &pairs {
                if !unique.iter().any(|(s, _)| *s == pair.0) {
                    unique.push(*pair);
                }
            }
            let scrub = scrub_of(&unique);
            let expected = reference(&body, &unique);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(body.len())).collect();
            cuts.push(0);
            cuts.push(body.len());
            cuts.sort_unstable();
            let pieces: Vec<&[u8]> = cuts.windows(2).map(|w| &body[w[0]..w[1]]).collect();
            prop_assert_eq!(&in_pieces(&scrub, &pieces), &expected);
            let bytewise: Vec<&[u8]> = body.chunks(1).collect();
            prop_assert_eq!(&in_pieces(&scrub, &bytewise), &expected);
            prop_assert_eq!(&scrub.body(&body).to_vec(), &expected);
        }
    }
}
