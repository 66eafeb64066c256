//! The audit chain: pure rules, no I/O.
//!
//! Every entry carries the hash of the one before it, and its own hash is
//! SHA-256 over a domain tag and the canonical JSON (RFC 8785 style, the same
//! canonicalization as execution manifests) of all its other fields. So an
//! entry edited, deleted, inserted or moved breaks the chain at the first
//! changed sequence number, and [`verify`] names it. Removing entries from
//! the end leaves a shorter chain that is still consistent; a signed
//! [`Checkpoint`] of an earlier head detects that too (CloudTrail's digest
//! files have the same purpose, but are only hourly; a checkpoint can be
//! taken as often as an operator likes, and every verify checks all of them
//! given).

use base64::Engine as _;
use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};
use gatehouse_core::UnixTime;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// The `prev_hash` of the first entry.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

const DOMAIN: &[u8] = b"gatehouse-audit:v1\n";
const CHECKPOINT_DOMAIN: &[u8] = b"gatehouse-audit-checkpoint:v1\n";

/// What an entry says before it is chained.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// When (Unix seconds).
    pub at: UnixTime,
    /// Who: a caller's name, `person:<name>`, or `gatehouse` for the door's own refusals.
    pub actor: String,
    /// What, as a stable dotted name (`policy.set`, `run.cancel`, `refusal`, ...).
    pub action: String,
    /// The tenant, when the change concerns one.
    pub tenant_id: Option<String>,
    /// The object: a run id, a grant id, a tenant id, `all`.
    pub subject: String,
    /// Codes, ids and counts only: never a secret, never a URL.
    pub detail: Value,
}

/// One chained entry, as stored and as `GET /v1/audit` returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Position in the chain, from 1, without gaps.
    pub seq: i64,
    /// The record.
    #[serde(flatten)]
    pub record: AuditRecord,
    /// The previous entry's hash ([`GENESIS_HASH`] for the first).
    pub prev_hash: String,
    /// This entry's hash.
    pub hash: String,
}

impl AuditRecord {
    /// Chains this record after `(prev_seq, prev_hash)`.
    pub fn chain(self, prev_seq: i64, prev_hash: &str) -> AuditEntry {
        self.chain_with_detail(prev_seq, prev_hash).0
    }

    /// [`chain`](Self::chain), also giving the canonical detail as stored,
    /// which the hash was computed over: the detail is written out once.
    pub fn chain_with_detail(self, prev_seq: i64, prev_hash: &str) -> (AuditEntry, String) {
        let (hash, detail) = self.hash_after(prev_seq, prev_hash);
        (AuditEntry { seq: prev_seq + 1, record: self, prev_hash: prev_hash.to_owned(), hash }, detail)
    }

    /// The hash this record takes chained after `(prev_seq, prev_hash)`,
    /// and its canonical detail as stored, without taking the record: a
    /// writer that stores the record's fields from a borrow need not copy
    /// the record (and its detail tree) to chain it.
    pub fn hash_after(&self, prev_seq: i64, prev_hash: &str) -> (String, String) {
        let detail = canonical_detail(&self.detail);
        let hash = entry_hash_over(prev_seq + 1, self, &detail, prev_hash);
        (hash, detail)
    }
}

/// The canonical text of `detail`, as stored. Values that JSON cannot hold
/// exactly (integers past ±2^53) are stored as null rather than rounded.
pub fn canonical_detail(detail: &Value) -> String {
    gatehouse_capability::canonical::canonical_string(detail).unwrap_or_else(|_| "null".to_owned())
}

/// Whether `text` is exactly the canonical JSON of what it says: parsed
/// strictly (a duplicate key anywhere refuses it) and written out again,
/// byte for byte the same.
pub fn is_canonical(text: &str) -> bool {
    gatehouse_capability::canonical::parse_strict(text.as_bytes())
        .ok()
        .and_then(|value| gatehouse_capability::canonical::canonical_string(&value).ok())
        .is_some_and(|canonical| canonical == text)
}

fn entry_hash(seq: i64, r: &AuditRecord, prev_hash: &str) -> String {
    entry_hash_over(seq, r, &canonical_detail(&r.detail), prev_hash)
}

/// SHA-256 over the domain tag and the canonical JSON object of the entry's
/// fields but its hash, written out member by member in RFC 8785's key order
/// with the detail's canonical text (`detail`) spliced in, rather than built
/// as a tree and canonicalized whole: the same bytes, without copying the
/// detail or writing it out twice.
fn entry_hash_over(seq: i64, r: &AuditRecord, detail: &str, prev_hash: &str) -> String {
    let text = |s: &str| canonical_detail(&Value::String(s.to_owned()));
    let tenant = r.tenant_id.as_deref().map_or_else(|| "null".to_owned(), text);
    let body = format!(
        "{{\"action\":{},\"actor\":{},\"at\":{},\"detail\":{detail},\"prev_hash\":{},\"seq\":{seq},\"subject\":{},\"tenant_id\":{tenant}}}",
        text(&r.action),
        text(&r.actor),
        r.at,
        text(prev_hash),
        text(&r.subject),
    );
    let mut h = Sha256::new();
    h.update(DOMAIN);
    h.update(body.as_bytes());
    hex::encode(h.finalize())
}

/// Why a chain is not intact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Broken {
    /// The first sequence number that does not check out.
    pub first_bad_seq: i64,
    /// A stable code: `seq_gap` (an entry missing or inserted out of order),
    /// `prev_hash_mismatch` (an entry removed, moved or inserted before it),
    /// `hash_mismatch` (the entry was edited), `detail_noncanonical` (the
    /// entry's stored detail is not exactly the canonical JSON its hash
    /// covers: a duplicate key, other spacing, key order or number form),
    /// `head_mismatch` (the recorded
    /// head disagrees with the last entry), `checkpoint_missing` (the chain
    /// ends before a signed checkpoint: entries were removed from the end),
    /// `checkpoint_mismatch` (the entry at a checkpoint's seq is another one).
    pub why: &'static str,
}

/// Walks a chain in pages. Feed entries in sequence order with
/// [`Verifier::push`]; [`Verifier::finish`] checks the end.
#[derive(Debug)]
pub struct Verifier {
    seq: i64,
    hash: String,
    checkpoints: Vec<(i64, String)>,
    broken: Option<Broken>,
}

impl Default for Verifier {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

impl Verifier {
    /// A verifier that also requires each `(seq, hash)` checkpoint to be on the chain.
    pub fn new(checkpoints: Vec<(i64, String)>) -> Self {
        Self { seq: 0, hash: GENESIS_HASH.to_owned(), checkpoints, broken: None }
    }

    /// Checks the next entry. After the first break, the rest is ignored.
    pub fn push(&mut self, e: &AuditEntry) {
        self.check(e, None);
    }

    /// Checks the next entry as stored: `stored_detail` is its detail's
    /// text exactly as the store holds it, which must be the canonical
    /// form (strictly parsed, refusing duplicate keys, and written out
    /// again byte for byte: no other spacing, key order, number or string
    /// form) — otherwise `detail_noncanonical`, since another reader of the
    /// row (a database's JSON functions) could read it otherwise — and is
    /// what the hash is computed over.
    pub fn push_stored(&mut self, e: &AuditEntry, stored_detail: &str) {
        self.check(e, Some(stored_detail));
    }

    fn check(&mut self, e: &AuditEntry, stored_detail: Option<&str>) {
        if self.broken.is_some() {
            return;
        }
        let expected = self.seq + 1;
        let hash = match stored_detail {
            Some(stored) => {
                is_canonical(stored).then(|| entry_hash_over(e.seq, &e.record, stored, &e.prev_hash))
            }
            None => Some(entry_hash(e.seq, &e.record, &e.prev_hash)),
        };
        let why = if e.seq != expected {
            Some("seq_gap")
        } else if e.prev_hash != self.hash {
            Some("prev_hash_mismatch")
        } else if hash.is_none() {
            Some("detail_noncanonical")
        } else if hash.as_deref() != Some(e.hash.as_str()) {
            Some("hash_mismatch")
        } else if self.checkpoints.iter().any(|(seq, hash)| *seq == e.seq && *hash != e.hash) {
            Some("checkpoint_mismatch")
        } else {
            None
        };
        match why {
            Some(why) => self.broken = Some(Broken { first_bad_seq: expected, why }),
            None => {
                self.seq = e.seq;
                self.hash.clone_from(&e.hash);
            }
        }
    }

    /// The verdict: the number of entries, or the first break. `head` is the
    /// store's recorded head `(seq, hash)`, which must match the last entry.
    pub fn finish(self, head: Option<(i64, &str)>) -> Result<i64, Broken> {
        if let Some(b) = self.broken {
            return Err(b);
        }
        if let Some((seq, hash)) = head
            && (seq != self.seq || hash != self.hash)
        {
            return Err(Broken { first_bad_seq: self.seq.min(seq) + 1, why: "head_mismatch" });
        }
        if self.checkpoints.iter().any(|(seq, _)| *seq > self.seq) {
            return Err(Broken { first_bad_seq: self.seq + 1, why: "checkpoint_missing" });
        }
        Ok(self.seq)
    }
}

/// A signed statement of the chain's head at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// What is signed.
    pub statement: CheckpointStatement,
    /// Ed25519 over the domain tag and the canonical statement, base64.
    pub signature: String,
}

/// The signed part of a [`Checkpoint`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointStatement {
    /// Format version, 1.
    pub v: u8,
    /// The head's sequence number.
    pub seq: i64,
    /// The head's hash.
    pub hash: String,
    /// When the checkpoint was taken.
    pub at: UnixTime,
}

fn statement_bytes(s: &CheckpointStatement) -> Vec<u8> {
    let value = serde_json::to_value(s).unwrap_or(Value::Null);
    let mut out = CHECKPOINT_DOMAIN.to_vec();
    out.extend_from_slice(canonical_detail(&value).as_bytes());
    out
}

impl Checkpoint {
    /// Signs the head `(seq, hash)` at `at`.
    pub fn sign(key: &SigningKey, seq: i64, hash: &str, at: UnixTime) -> Self {
        let statement = CheckpointStatement { v: 1, seq, hash: hash.to_owned(), at };
        let signature = key.sign(&statement_bytes(&statement));
        Self { statement, signature: base64::engine::general_purpose::STANDARD.encode(signature.to_bytes()) }
    }

    /// The `(seq, hash)` it vouches for, if `key` signed it.
    pub fn verify(&self, key: &VerifyingKey) -> Option<(i64, String)> {
        let bytes = base64::engine::general_purpose::STANDARD.decode(&self.signature).ok()?;
        let signature = Signature::from_slice(&bytes).ok()?;
        key.verify(&statement_bytes(&self.statement), &signature).ok()?;
        (self.statement.v == 1).then(|| (self.statement.seq, self.statement.hash.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(n: i64) -> AuditRecord {
        AuditRecord {
            at: 1_700_000_000 + n,
            actor: "platform".into(),
            action: "policy.set".into(),
            tenant_id: Some("t1".into()),
            subject: "t1".into(),
            detail: json!({"version": n}),
        }
    }

    fn chain(n: i64) -> Vec<AuditEntry> {
        let mut out: Vec<AuditEntry> = Vec::new();
        for i in 1..=n {
            let (seq, hash) = out.last().map_or((0, GENESIS_HASH.to_owned()), |e| (e.seq, e.hash.clone()));
            out.push(record(i).chain(seq, &hash));
        }
        out
    }

    fn verify(entries: &[AuditEntry], checkpoints: Vec<(i64, String)>) -> Result<i64, Broken> {
        let mut v = Verifier::new(checkpoints);
        entries.iter().for_each(|e| v.push(e));
        v.finish(None)
    }

    /// The hash's definition, written the slow way: the canonical JSON of
    /// the whole entry as a tree.
    fn hash_by_definition(seq: i64, r: &AuditRecord, prev_hash: &str) -> String {
        let body = json!({"seq": seq, "at": r.at, "actor": r.actor, "action": r.action, "tenant_id": r.tenant_id,
            "subject": r.subject, "detail": r.detail, "prev_hash": prev_hash});
        let mut h = Sha256::new();
        h.update(DOMAIN);
        h.update(gatehouse_capability::canonical::canonical_string(&body).unwrap().as_bytes());
        hex::encode(h.finalize())
    }

    #[test]
    fn only_the_exact_canonical_text_is_canonical() {
        assert!(is_canonical(r#"{"a":1,"b":[true,null,"x"]}"#));
        assert!(is_canonical("null"));
        for text in [
            r#"{"a":1,"a":1}"#,
            r#"{"a":2,"a":1}"#,
            r#"{"b":1,"a":1}"#,
            r#"{"a": 1}"#,
            r#"{"a":1.0}"#,
            r#"{"a":1e0}"#,
            r#"{"a":"\u0078"}"#,
            r#" {"a":1}"#,
            "{\"a\":9007199254740993}",
            "not json",
        ] {
            assert!(!is_canonical(text), "{text}");
        }
        // A pushed entry is checked against what is stored, not what it reads as.
        let good = chain(2);
        let stored = canonical_detail(&good[1].record.detail);
        let mut v = Verifier::default();
        v.push_stored(&good[0], &canonical_detail(&good[0].record.detail));
        v.push_stored(&good[1], &format!("{stored} "));
        assert_eq!(v.finish(None).unwrap_err(), Broken { first_bad_seq: 2, why: "detail_noncanonical" });
    }

    proptest::proptest! {
        /// Chains written before the hash was spliced together still verify:
        /// the spliced text is the canonical text, for any strings (quotes,
        /// control characters, non-ASCII) and any detail.
        #[test]
        fn the_spliced_hash_is_the_canonical_hash(
            seq in 1i64..(1 << 53), at in -(1i64 << 53)..(1 << 53), actor in "\\PC{0,6}|[\"\\\\\\x00-\\x1f\\x7f\\x{2028}é😀]{0,6}",
            action in "[a-z._]{1,12}", tenant in proptest::option::of("\\PC{0,8}"), subject in "\\PC{0,8}",
            key in "\\PC{0,6}", n in -(1i64 << 53)..(1 << 53), prev in "[0-9a-f]{64}",
        ) {
            // Numbers within JSON's exact integers, which is all an entry holds.
            let detail = json!({key.clone(): n, "z": [key, true, null, {"a": 1.5}]});
            let r = AuditRecord { at, actor, action, tenant_id: tenant, subject, detail };
            let (entry, stored) = r.clone().chain_with_detail(seq - 1, &prev);
            let as_read = AuditRecord { detail: serde_json::from_str(&stored).unwrap(), ..r };
            proptest::prop_assert_eq!(&entry.hash, &hash_by_definition(seq, &as_read, &prev));
            proptest::prop_assert_eq!(entry.hash, entry_hash(seq, &as_read, &prev));
        }
    }

    #[test]
    fn an_intact_chain_verifies() {
        assert_eq!(verify(&chain(5), vec![]), Ok(5));
        assert_eq!(verify(&[], vec![]), Ok(0));
    }

    #[test]
    fn each_kind_of_tampering_names_the_first_bad_entry() {
        let good = chain(6);
        let mut edited = good.clone();
        edited[2].record.detail = json!({"version": 99});
        assert_eq!(verify(&edited, vec![]).unwrap_err(), Broken { first_bad_seq: 3, why: "hash_mismatch" });

        let mut deleted = good.clone();
        deleted.remove(3);
        assert_eq!(verify(&deleted, vec![]).unwrap_err().first_bad_seq, 4);

        // An entry deleted and the later ones renumbered: the chain of hashes breaks.
        let mut renumbered = good.clone();
        renumbered.remove(3);
        for e in &mut renumbered[3..] {
            e.seq -= 1;
        }
        assert_eq!(
            verify(&renumbered, vec![]).unwrap_err(),
            Broken { first_bad_seq: 4, why: "prev_hash_mismatch" }
        );

        let mut reordered = good.clone();
        reordered.swap(1, 2);
        assert_eq!(verify(&reordered, vec![]).unwrap_err().first_bad_seq, 2);

        let mut inserted = good.clone();
        let forged = record(42).chain(2, &good[1].hash);
        inserted.insert(2, forged);
        for e in &mut inserted[3..] {
            e.seq += 1;
        }
        assert_eq!(
            verify(&inserted, vec![]).unwrap_err(),
            Broken { first_bad_seq: 4, why: "prev_hash_mismatch" }
        );
    }

    #[test]
    fn truncation_is_caught_by_a_checkpoint_and_by_the_recorded_head() {
        let good = chain(6);
        let key = SigningKey::from_bytes(&[7; 32]);
        let cp = Checkpoint::sign(&key, 6, &good[5].hash, 1);
        let vouched = cp.verify(&key.verifying_key()).unwrap();
        assert_eq!(verify(&good, vec![vouched.clone()]), Ok(6));
        assert_eq!(
            verify(&good[..4], vec![vouched]).unwrap_err(),
            Broken { first_bad_seq: 5, why: "checkpoint_missing" }
        );
        let mut v = Verifier::default();
        good[..4].iter().for_each(|e| v.push(e));
        assert_eq!(v.finish(Some((6, &good[5].hash))).unwrap_err().why, "head_mismatch");
    }

    proptest::proptest! {
        /// Any one edit, deletion, swap or duplication anywhere in a chain
        /// is caught, at or before the entry it touched.
        #[test]
        fn any_single_change_is_caught_at_or_before_it(n in 2i64..24, at in 0usize..24, kind in 0u8..5, text in "[a-z]{1,8}") {
            let good = chain(n);
            let at = at % good.len();
            let mut bad = good.clone();
            match kind {
                0 => bad[at].record.actor = format!("{}{text}", bad[at].record.actor),
                1 => { bad.remove(at); }
                2 => { let j = (at + 1) % good.len(); bad.swap(at, j); }
                3 => bad[at].record.detail = json!({"version": text}),
                _ => { let dup = bad[at].clone(); bad.insert(at, dup); }
            }
            let mut v = Verifier::default();
            bad.iter().for_each(|e| v.push(e));
            // Removing the last entry leaves a shorter intact chain: only the
            // recorded head (or a checkpoint) shows it.
            let head = good.last().map(|e| (e.seq, e.hash.as_str()));
            let broken = v.finish(head).unwrap_err();
            proptest::prop_assert!(broken.first_bad_seq <= i64::try_from(at).unwrap() + 2, "{broken:?} at {at}");
        }
    }

    #[test]
    fn a_checkpoint_binds_its_signer_and_its_statement() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let other = SigningKey::from_bytes(&[8; 32]);
        let mut cp = Checkpoint::sign(&key, 3, "ab", 1);
        assert!(cp.verify(&other.verifying_key()).is_none());
        cp.statement.seq = 4;
        assert!(cp.verify(&key.verifying_key()).is_none());
    }
}
