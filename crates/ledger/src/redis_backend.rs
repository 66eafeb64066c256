//! The Redis backend (`GATEHOUSE_REDIS_URL`).
//!
//! Every check-and-update is one Lua script (EVALSHA, falling back to EVAL on
//! NOSCRIPT), so it runs atomically on the server: concurrent consumers on any
//! number of gatehouse nodes can never spend a budget twice. One grant's keys
//! share a hash tag (`{grant_id}`), so they live in one Redis Cluster slot.
//!
//! Tenant-wide and global revocation are markers (see `epoch`): the
//! scripts keep a registration counter, per-tenant and global epoch hashes
//! beside the records, and every spend checks them. Those keys are shared by
//! all grants, so the scripts name them themselves rather than through KEYS:
//! this backend needs a standalone Redis (or a single-shard one), not a
//! multi-shard Redis Cluster.
//!
//! The ledger has its own multiplexed connection (redis-rs' `ConnectionManager`
//! needs no pool for non-blocking commands), created lazily and reconnecting
//! by itself, with connection and response timeouts. Any error or timeout is
//! `ledger_unavailable`: fail closed, and recover when Redis returns.

use std::sync::Arc;
use std::time::Duration;

use gatehouse_core::{Reason, UnixTime};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Script, Value};

use crate::record::{GrantRecord, Operation, RETENTION_SECS, Registration, Remaining, Status};
use crate::{LedgerBackend, Rate, Registered, RevokeScope, rate_window};

/// Numbers the scripts handle must be exact in Lua's doubles.
const MAX_EXACT: u64 = (1 << 53) - 1;

/// Connection settings.
#[derive(Clone)]
pub struct RedisLedgerConfig {
    /// `redis://`, `rediss://` or `redis+unix://` URL. May hold a password;
    /// never logged.
    pub url: String,
    /// Prefix of every key, e.g. `gatehouse:ledger:`.
    pub prefix: String,
    /// Upper bound on one ledger operation, connection included.
    pub op_timeout: Duration,
}

impl std::fmt::Debug for RedisLedgerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLedgerConfig")
            .field("prefix", &self.prefix)
            .field("op_timeout", &self.op_timeout)
            .finish_non_exhaustive()
    }
}

impl RedisLedgerConfig {
    /// Defaults: prefix `gatehouse:ledger:`, 1 s per operation.
    pub fn new(url: impl Into<String>) -> Self {
        Self { url: url.into(), prefix: "gatehouse:ledger:".into(), op_timeout: Duration::from_secs(1) }
    }
}

/// The Redis-backed ledger. Cheap to clone (one shared connection).
#[derive(Clone)]
pub struct RedisLedger {
    conn: ConnectionManager,
    prefix: Arc<str>,
    op_timeout: Duration,
    scripts: Arc<Scripts>,
}

impl std::fmt::Debug for RedisLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLedger").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

struct Scripts {
    register: Script,
    consume: Script,
    revoke: Script,
    revoke_tenant: Script,
    revoke_all: Script,
    bump_leases: Script,
    take_rate: Script,
}

/// KEYS: this window's count, the previous window's.
/// ARGV: limit, window seconds, seconds elapsed in this window.
/// Mirrors `rate_allows`; a count lives two windows.
const TAKE_RATE: &str = r"
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local previous = tonumber(redis.call('GET', KEYS[2]) or '0')
local limit, window, elapsed = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if previous * (window - elapsed) + current * window >= limit * window then return 0 end
redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], 2 * window)
return 1
";

/// Whether a marker revokes the grant registered as `sq` under tenant `t`
/// (`Epochs::covers`). Markers are 0 until first set; legacy records
/// without a number (0) are covered by any marker.
const COVERED: &str = r"
local function covered(p, sq, t)
  local g = tonumber(redis.call('HGET', p .. 'epoch:all', 'e') or '0')
  if g > 0 and sq <= g then return true end
  if t and t ~= '' then
    local e = tonumber(redis.call('HGET', p .. 'epoch:t:' .. t, 'e') or '0')
    if e > 0 and sq <= e then return true end
  end
  return false
end
";

/// KEYS: record, inputs, read sessions, outputs.
/// ARGV: registration JSON, exp, max_requests, max_upload_bytes,
/// max_output_files, output session ("" for none), expire-at, key prefix,
/// tenant ("" for none), max_egress_bytes, max_tool_calls, number of inputs, inputs…,
/// read sessions…
/// Mirrors `Epochs::register` for the sequence number and the counters.
const REGISTER: &str = r"
local existing = redis.call('HGET', KEYS[1], 'reg')
if existing then
  if existing == ARGV[1] then return 'existing' end
  return 'conflict'
end
local p, t = ARGV[8], ARGV[9]
local seq = redis.call('INCR', p .. 'seq')
local g = tonumber(redis.call('HGET', p .. 'epoch:all', 'e') or '0')
redis.call('HINCRBY', p .. 'epoch:all', 'n', 1)
if t ~= '' then
  local tk = p .. 'epoch:t:' .. t
  if tonumber(redis.call('HGET', tk, 'g') or '0') ~= g then redis.call('HSET', tk, 'n', 0, 'g', g) end
  redis.call('HINCRBY', tk, 'n', 1)
end
redis.call('HSET', KEYS[1], 'reg', ARGV[1], 'status', 'active', 'exp', ARGV[2], 'mr', ARGV[3], 'mu', ARGV[4],
  'mf', ARGV[5], 'os', ARGV[6], 'xa', ARGV[7], 'request_count', 0, 'read_count', 0, 'upload_count', 0,
  'tool_call_count', 0, 'uploaded_bytes', 0, 'sq', seq, 'tn', t, 'me', ARGV[10], 'egress_bytes', 0, 'mt', ARGV[11])
local n = tonumber(ARGV[12])
for i = 13, 12 + n do redis.call('SADD', KEYS[2], ARGV[i]) end
for i = 13 + n, #ARGV do redis.call('SADD', KEYS[3], ARGV[i]) end
for i = 1, 3 do redis.call('EXPIREAT', KEYS[i], ARGV[7]) end
return 'new'
";

/// KEYS: record, inputs, read sessions, outputs.
/// ARGV: operation, now, file/session, bytes, output file id, key prefix.
/// Mirrors `GrantRecord::consume`: status (and markers), expiry, scope,
/// then budgets; all changes or none. Egress bytes are not a request.
/// A record without an egress budget (registered before there was one)
/// has none left; one without a tool-call budget has no limit beyond its
/// requests.
const CONSUME: &str = r"
local h = redis.call('HMGET', KEYS[1], 'status', 'exp', 'mr', 'mu', 'mf', 'os', 'request_count', 'uploaded_bytes', 'xa', 'sq', 'tn', 'me', 'egress_bytes', 'lg', 'mt', 'tool_call_count')
if not h[1] then return {0, 'grant_unknown'} end
if h[1] == 'revoked' then return {0, 'grant_revoked'} end
if covered(ARGV[6], tonumber(h[10] or '0'), h[11]) then return {0, 'grant_revoked'} end
if tonumber(ARGV[2]) >= tonumber(h[2]) then return {0, 'grant_expired'} end
local op = ARGV[1]
if op == 'read_file' and redis.call('SISMEMBER', KEYS[2], ARGV[3]) == 0 then return {0, 'scope_file_not_granted'} end
if op == 'read_session' and redis.call('SISMEMBER', KEYS[3], ARGV[3]) == 0 then return {0, 'scope_session_not_granted'} end
if op == 'upload' and (h[6] == '' or h[6] ~= ARGV[3]) then return {0, 'scope_output_session_mismatch'} end
local rc, mr = tonumber(h[7]), tonumber(h[3])
local ub, mu, mf = tonumber(h[8]), tonumber(h[4]), tonumber(h[5])
local eb, me = tonumber(h[13] or '0'), tonumber(h[12] or '0')
local lg = tonumber(h[14] or '0')
local mt, tc = tonumber(h[15] or '9007199254740991'), tonumber(h[16] or '0')
local files = redis.call('SCARD', KEYS[4])
if op == 'egress' then
  if eb + tonumber(ARGV[4]) > me then return {0, 'budget_egress_bytes_exhausted'} end
  eb = redis.call('HINCRBY', KEYS[1], 'egress_bytes', ARGV[4])
  return {1, math.max(0, mr - rc), math.max(0, mu - ub), math.max(0, mf - files), me - eb, math.max(0, mt - tc), lg}
end
if rc >= mr then return {0, 'budget_requests_exhausted'} end
if op == 'tool_call' and tc >= mt then return {0, 'budget_tool_calls_exhausted'} end
local new_file = false
if op == 'upload' then
  if ub + tonumber(ARGV[4]) > mu then return {0, 'budget_upload_bytes_exhausted'} end
  new_file = redis.call('SISMEMBER', KEYS[4], ARGV[5]) == 0
  if new_file and files >= mf then return {0, 'budget_output_files_exhausted'} end
end
redis.call('HINCRBY', KEYS[1], 'request_count', 1)
if op == 'read_file' or op == 'read_session' then
  redis.call('HINCRBY', KEYS[1], 'read_count', 1)
elseif op == 'tool_call' then
  tc = redis.call('HINCRBY', KEYS[1], 'tool_call_count', 1)
elseif op == 'upload' then
  redis.call('HINCRBY', KEYS[1], 'upload_count', 1)
  ub = redis.call('HINCRBY', KEYS[1], 'uploaded_bytes', ARGV[4])
  if new_file then
    redis.call('SADD', KEYS[4], ARGV[5])
    redis.call('EXPIREAT', KEYS[4], h[9])
    files = files + 1
  end
end
return {1, mr - rc - 1, mu - ub, mf - files, math.max(0, me - eb), math.max(0, mt - tc), lg}
";

/// KEYS: record. Bumps the lease generation of a known record.
const BUMP_LEASES: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
return redis.call('HINCRBY', KEYS[1], 'lg', 1)
";

/// KEYS: record. ARGV: key prefix. Returns 1 if an active grant that no
/// marker covered was revoked (`Epochs::revoked_one`).
const REVOKE: &str = r"
if redis.call('HGET', KEYS[1], 'status') ~= 'active' then return 0 end
redis.call('HSET', KEYS[1], 'status', 'revoked')
local p = ARGV[1]
local h = redis.call('HMGET', KEYS[1], 'sq', 'tn')
local t = h[2]
if covered(p, tonumber(h[1] or '0'), t) then return 0 end
if tonumber(redis.call('HGET', p .. 'epoch:all', 'n') or '0') > 0 then redis.call('HINCRBY', p .. 'epoch:all', 'n', -1) end
if t and t ~= '' then
  local tk = p .. 'epoch:t:' .. t
  local g = tonumber(redis.call('HGET', p .. 'epoch:all', 'e') or '0')
  if tonumber(redis.call('HGET', tk, 'g') or '0') == g and tonumber(redis.call('HGET', tk, 'n') or '0') > 0 then
    redis.call('HINCRBY', tk, 'n', -1)
  end
end
return 1
";

/// ARGV: key prefix, tenant. `Epochs::revoke_tenant`.
const REVOKE_TENANT: &str = r"
local p, t = ARGV[1], ARGV[2]
local last = tonumber(redis.call('GET', p .. 'seq') or '0')
local g = tonumber(redis.call('HGET', p .. 'epoch:all', 'e') or '0')
local tk = p .. 'epoch:t:' .. t
local live = 0
if tonumber(redis.call('HGET', tk, 'g') or '0') == g then live = tonumber(redis.call('HGET', tk, 'n') or '0') end
redis.call('HSET', tk, 'e', last, 'n', 0, 'g', g)
local n = tonumber(redis.call('HGET', p .. 'epoch:all', 'n') or '0')
redis.call('HSET', p .. 'epoch:all', 'n', math.max(0, n - live))
return live
";

/// ARGV: key prefix. `Epochs::revoke_all`.
const REVOKE_ALL: &str = r"
local p = ARGV[1]
local last = tonumber(redis.call('GET', p .. 'seq') or '0')
local n = tonumber(redis.call('HGET', p .. 'epoch:all', 'n') or '0')
redis.call('HSET', p .. 'epoch:all', 'e', last, 'n', 0)
return n
";

/// Whether a `maxmemory-policy` keeps every ledger key. Only `noeviction`
/// does. The revocation markers (`seq`, `epoch:all`, `epoch:t:*`) carry no
/// TTL, so a `volatile-*` policy would spare them, but each grant's record
/// and its run's and tenant's index sets carry one (they expire an hour
/// after the grant), and ending or cancelling a run revokes the grants its
/// index set names: an evicted index set would leave a grant live after
/// its run ended. `allkeys-*` may evict the markers themselves, which
/// would bring back every grant the kill switch or emergency revoke ended.
pub fn eviction_is_safe(policy: &str) -> bool {
    policy == "noeviction"
}

impl RedisLedger {
    /// A ledger on `config.url`. Connects lazily: an unreachable Redis makes
    /// operations refuse with `ledger_unavailable`, not construction fail.
    /// Must be called inside a Tokio runtime (the connection task runs there);
    /// outside one it refuses instead of panicking.
    pub fn new(config: &RedisLedgerConfig) -> Result<Self, Reason> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Reason::LedgerUnavailable);
        }
        let client = redis::Client::open(config.url.as_str()).map_err(|_| Reason::LedgerUnavailable)?;
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.op_timeout))
            .set_response_timeout(Some(config.op_timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(200));
        let conn = ConnectionManager::new_lazy_with_config(client, manager_config)
            .map_err(|_| Reason::LedgerUnavailable)?;
        Ok(Self {
            conn,
            prefix: config.prefix.as_str().into(),
            op_timeout: config.op_timeout,
            scripts: Arc::new(Scripts {
                register: Script::new(REGISTER),
                consume: Script::new(&format!("{COVERED}{CONSUME}")),
                revoke: Script::new(&format!("{COVERED}{REVOKE}")),
                revoke_tenant: Script::new(REVOKE_TENANT),
                revoke_all: Script::new(REVOKE_ALL),
                bump_leases: Script::new(BUMP_LEASES),
                take_rate: Script::new(TAKE_RATE),
            }),
        })
    }

    /// The server's `maxmemory-policy`, read from `INFO memory` (which
    /// managed Redis services allow where `CONFIG GET` is often renamed).
    pub async fn eviction_policy(&self) -> Result<String, Reason> {
        let mut conn = self.conn.clone();
        let info: String =
            self.run("info", redis::cmd("INFO").arg("memory").query_async::<String>(&mut conn)).await?;
        info.lines()
            .find_map(|line| line.strip_prefix("maxmemory_policy:"))
            .map(|policy| policy.trim().to_owned())
            .ok_or(Reason::LedgerUnavailable)
    }

    /// Refuses (`ledger_eviction_unsafe`) unless the server never evicts
    /// (see [`eviction_is_safe`]); `ledger_unavailable` when it cannot say.
    pub async fn check_eviction(&self) -> Result<(), Reason> {
        let policy = self.eviction_policy().await?;
        if eviction_is_safe(&policy) {
            return Ok(());
        }
        tracing::error!(
            maxmemory_policy = %policy,
            "the ledger's Redis may evict keys (maxmemory-policy {policy}): an evicted revocation \
             marker, run index or grant record would undo a revocation; set maxmemory-policy noeviction"
        );
        Err(Reason::LedgerEvictionUnsafe)
    }

    fn record_keys(&self, grant_id: &str) -> [String; 4] {
        let base = format!("{}{{{grant_id}}}", self.prefix);
        let (inputs, sessions, outputs) = (format!("{base}:in"), format!("{base}:rs"), format!("{base}:out"));
        [base, inputs, sessions, outputs]
    }

    fn index_key(&self, kind: &str, id: &str) -> String {
        format!("{}idx:{kind}:{{{id}}}", self.prefix)
    }

    /// Runs `fut` under the operation timeout; every failure is `ledger_unavailable`.
    async fn run<T>(
        &self,
        what: &'static str,
        fut: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, Reason> {
        match tokio::time::timeout(self.op_timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                tracing::warn!(operation = what, kind = ?e.kind(), "ledger unavailable: redis error");
                Err(Reason::LedgerUnavailable)
            }
            Err(_) => {
                tracing::warn!(operation = what, "ledger unavailable: redis timed out");
                Err(Reason::LedgerUnavailable)
            }
        }
    }

    async fn revoke_one(&self, grant_id: &str) -> Result<u64, Reason> {
        let [rec, ..] = self.record_keys(grant_id);
        let mut conn = self.conn.clone();
        self.run("revoke", self.scripts.revoke.key(rec).arg(&*self.prefix).invoke_async::<u64>(&mut conn))
            .await
    }

    async fn members(&self, key: String) -> Result<Vec<String>, Reason> {
        let mut conn = self.conn.clone();
        self.run("revoke", redis::cmd("SMEMBERS").arg(key).query_async::<Vec<String>>(&mut conn)).await
    }
}

impl LedgerBackend for RedisLedger {
    async fn take_rate(
        &self,
        key: &str,
        limit: u64,
        window_secs: i64,
        now: UnixTime,
    ) -> Result<Rate, Reason> {
        let window_secs = window_secs.max(1);
        let (window, elapsed) = rate_window(window_secs, now);
        // One hash tag for both windows' keys: one slot on a cluster.
        let base = format!("{}rate:{{{key}}}", self.prefix);
        let (current, previous) = (format!("{base}:{window}"), format!("{base}:{}", window - 1));
        let mut conn = self.conn.clone();
        let mut script = self.scripts.take_rate.key(current);
        script.key(previous).arg(limit).arg(window_secs).arg(elapsed);
        let taken: i64 = self.run("take_rate", script.invoke_async(&mut conn)).await?;
        Ok(match taken {
            1 => Rate::Taken,
            _ => Rate::Spent { retry_after_secs: (window_secs - elapsed).max(1) },
        })
    }

    async fn register(&self, registration: &Registration) -> Result<Registered, Reason> {
        let r = registration;
        if [r.max_requests, r.max_upload_bytes, r.max_output_files, r.max_egress_bytes, r.max_tool_calls]
            .iter()
            .any(|&n| n > MAX_EXACT)
        {
            return Err(Reason::GrantConflict);
        }
        let expire_at = r.exp.saturating_add(RETENTION_SECS);
        let mut conn = self.conn.clone();
        // The run's index first: an entry for a grant that failed to
        // register is harmless, but a grant missing from it would escape its
        // run's revocation. (Tenant-wide and global revocation need no index.)
        let mut pipe = redis::pipe();
        let key = self.index_key("exec", &r.exec_id);
        pipe.cmd("SADD").arg(&key).arg(&r.grant_id).ignore();
        pipe.cmd("EXPIREAT").arg(&key).arg(expire_at).arg("GT").ignore();
        pipe.cmd("EXPIREAT").arg(&key).arg(expire_at).arg("NX").ignore();
        self.run("register", pipe.query_async::<()>(&mut conn)).await?;

        let reg_json = serde_json::to_string(r).map_err(|_| Reason::LedgerUnavailable)?;
        let [rec, ins, rss, outs] = self.record_keys(&r.grant_id);
        let mut invocation = self.scripts.register.key(rec);
        invocation
            .key(ins)
            .key(rss)
            .key(outs)
            .arg(reg_json)
            .arg(r.exp)
            .arg(r.max_requests)
            .arg(r.max_upload_bytes)
            .arg(r.max_output_files)
            .arg(r.output_session_id.as_deref().unwrap_or(""))
            .arg(expire_at)
            .arg(&*self.prefix)
            .arg(r.tenant_id.as_deref().unwrap_or(""))
            .arg(r.max_egress_bytes)
            .arg(r.max_tool_calls)
            .arg(r.input_files.len())
            .arg(&r.input_files)
            .arg(&r.read_sessions);
        match self.run("register", invocation.invoke_async::<String>(&mut conn)).await?.as_str() {
            "new" => Ok(Registered::New),
            "existing" => Ok(Registered::Existing),
            _ => Err(Reason::GrantConflict),
        }
    }

    async fn consume(&self, grant_id: &str, op: &Operation, now: UnixTime) -> Result<Remaining, Reason> {
        let (name, target, bytes, file_id) = match op {
            Operation::Request => ("request", "", 0, ""),
            Operation::ReadFile { file } => ("read_file", file.as_str(), 0, ""),
            Operation::ReadSession { session } => ("read_session", session.as_str(), 0, ""),
            // Budgets never exceed 2^53-1, so clamping keeps "too large" too large.
            Operation::Upload { session, bytes, output_file_id } => {
                ("upload", session.as_str(), (*bytes).min(MAX_EXACT + 1), output_file_id.as_str())
            }
            Operation::ToolCall => ("tool_call", "", 0, ""),
            Operation::Egress { bytes } => ("egress", "", (*bytes).min(MAX_EXACT + 1), ""),
        };
        let [rec, ins, rss, outs] = self.record_keys(grant_id);
        let mut conn = self.conn.clone();
        let mut invocation = self.scripts.consume.key(rec);
        invocation
            .key(ins)
            .key(rss)
            .key(outs)
            .arg(name)
            .arg(now)
            .arg(target)
            .arg(bytes)
            .arg(file_id)
            .arg(&*self.prefix);
        let reply = self.run("consume", invocation.invoke_async::<Vec<Value>>(&mut conn)).await?;
        let int = |v: &Value| match v {
            Value::Int(n) => u64::try_from(*n).ok(),
            _ => None,
        };
        match reply.as_slice() {
            [Value::Int(1), a, b, c, d, t, e] => match (int(a), int(b), int(c), int(d), int(t), int(e)) {
                (
                    Some(requests),
                    Some(upload_bytes),
                    Some(output_files),
                    Some(egress_bytes),
                    Some(tool_calls),
                    Some(lease_generation),
                ) => Ok(Remaining {
                    requests,
                    upload_bytes,
                    output_files,
                    egress_bytes,
                    tool_calls,
                    lease_generation,
                }),
                _ => Err(Reason::LedgerUnavailable),
            },
            [Value::Int(0), reason] => {
                let text = match reason {
                    Value::BulkString(b) => std::str::from_utf8(b).ok(),
                    Value::SimpleString(s) => Some(s.as_str()),
                    _ => None,
                };
                // An unexpected reply is not a reason to allow: fail closed.
                Err(text.and_then(Reason::parse).unwrap_or(Reason::LedgerUnavailable))
            }
            _ => Err(Reason::LedgerUnavailable),
        }
    }

    async fn revoke(&self, scope: &RevokeScope) -> Result<u64, Reason> {
        let mut conn = self.conn.clone();
        let ids = match scope {
            RevokeScope::Grant(id) => return self.revoke_one(id).await,
            RevokeScope::Exec(exec) => self.members(self.index_key("exec", exec)).await?,
            RevokeScope::Tenant(t) => {
                let mut invocation = self.scripts.revoke_tenant.prepare_invoke();
                invocation.arg(&*self.prefix).arg(t);
                return self.run("revoke", invocation.invoke_async::<u64>(&mut conn)).await;
            }
            RevokeScope::All => {
                let mut invocation = self.scripts.revoke_all.prepare_invoke();
                invocation.arg(&*self.prefix);
                return self.run("revoke", invocation.invoke_async::<u64>(&mut conn)).await;
            }
        };
        let mut revoked = 0;
        for id in ids {
            revoked += self.revoke_one(&id).await?;
        }
        Ok(revoked)
    }

    async fn bump_lease_generation(&self, grant_id: &str) -> Result<u64, Reason> {
        let [rec, ..] = self.record_keys(grant_id);
        let mut conn = self.conn.clone();
        let generation =
            self.run("bump_leases", self.scripts.bump_leases.key(rec).invoke_async::<i64>(&mut conn)).await?;
        u64::try_from(generation).map_err(|_| Reason::GrantUnknown)
    }

    async fn lease_generation(&self, grant_id: &str) -> Result<u64, Reason> {
        let [rec, ..] = self.record_keys(grant_id);
        let mut conn = self.conn.clone();
        let generation: Option<String> = self
            .run("lease_generation", redis::cmd("HGET").arg(&rec).arg("lg").query_async(&mut conn))
            .await?;
        // A field that is not a number was not written by the bump script.
        generation.map_or(Ok(0), |g| g.parse::<u64>().map_err(|_| Reason::LedgerUnavailable))
    }

    async fn get(&self, grant_id: &str) -> Result<Option<GrantRecord>, Reason> {
        let [rec, _, _, outs] = self.record_keys(grant_id);
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        pipe.cmd("HGETALL").arg(&rec).cmd("SMEMBERS").arg(&outs);
        let (fields, mut outputs): (std::collections::HashMap<String, String>, Vec<String>) =
            self.run("get", pipe.query_async(&mut conn)).await?;
        let Some(reg) = fields.get("reg") else { return Ok(None) };
        let seq = fields.get("sq").and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let tenant = fields.get("tn").filter(|t| !t.is_empty());
        let mut pipe = redis::pipe();
        pipe.cmd("HGET").arg(format!("{}epoch:all", self.prefix)).arg("e");
        pipe.cmd("HGET")
            .arg(format!("{}epoch:t:{}", self.prefix, tenant.map_or("", String::as_str)))
            .arg("e");
        let (global, of_tenant): (Option<u64>, Option<u64>) =
            self.run("get", pipe.query_async(&mut conn)).await?;
        let marked = |epoch: Option<u64>| epoch.is_some_and(|e| e > 0 && seq <= e);
        let covered = marked(global) || (tenant.is_some() && marked(of_tenant));
        let registration: Registration = serde_json::from_str(reg).map_err(|_| Reason::LedgerUnavailable)?;
        let count = |k: &str| fields.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        outputs.sort();
        Ok(Some(GrantRecord {
            registration,
            status: if fields.get("status").map(String::as_str) == Some("active") && !covered {
                Status::Active
            } else {
                Status::Revoked
            },
            request_count: count("request_count"),
            read_count: count("read_count"),
            upload_count: count("upload_count"),
            tool_call_count: count("tool_call_count"),
            uploaded_bytes: count("uploaded_bytes"),
            egress_bytes: count("egress_bytes"),
            output_file_ids: outputs,
            seq,
            lease_generation: count("lg"),
        }))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_noeviction_keeps_every_ledger_key() {
        assert!(super::eviction_is_safe("noeviction"));
        for policy in [
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
            "",
        ] {
            assert!(!super::eviction_is_safe(policy), "{policy}");
        }
    }
}
