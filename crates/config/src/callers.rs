//! The caller file (`GATEHOUSE_CALLERS_FILE`): named caller tokens with
//! scopes, optionally bound to tenants.

use std::path::Path;

use gatehouse_capability::{CallerToken, Callers, Scope};

use crate::names;
use crate::reader::Reader;

impl Reader<'_> {
    /// Reads `GATEHOUSE_CALLERS_FILE`: every entry needs a unique name (an
    /// id), known scopes and a 64-digit lowercase hex SHA-256 of its token,
    /// and may bind the caller to `tenants` (a non-empty list of distinct ids).
    pub(crate) fn callers(&mut self) -> Callers {
        let Some(path) = self.get(names::CALLERS_FILE).map(|p| p.trim().to_owned()) else {
            return Callers::default();
        };
        let text = match self.source.read_file(Path::new(&path)) {
            Ok(text) => text,
            Err(e) => {
                self.problem(
                    names::CALLERS_FILE,
                    "unreadable_file",
                    format!("cannot read {path}: {}", e.kind()),
                );
                return Callers::default();
            }
        };
        let table: toml::Table = match toml::from_str(&text) {
            Ok(t) => t,
            Err(_) => {
                self.problem(names::CALLERS_FILE, "invalid_value", "not TOML");
                return Callers::default();
            }
        };
        let mut callers: Vec<CallerToken> = Vec::new();
        let mut digests: Vec<String> = Vec::new();
        let entries = table.get("caller").and_then(toml::Value::as_array).cloned().unwrap_or_default();
        if entries.is_empty() || table.keys().any(|k| k != "caller") {
            self.problem(
                names::CALLERS_FILE,
                "invalid_value",
                "must hold [[caller]] entries and nothing else",
            );
        }
        for (i, entry) in entries.iter().enumerate() {
            let field = |k: &str| entry.get(k);
            let name = field("name").and_then(toml::Value::as_str).unwrap_or_default();
            let digest = field("token_sha256").and_then(toml::Value::as_str).unwrap_or_default();
            let scopes: Option<Vec<Scope>> = field("scopes")
                .and_then(toml::Value::as_array)
                .map(|list| {
                    list.iter().map(|v| v.as_str().and_then(Scope::parse)).collect::<Option<Vec<_>>>()
                })
                .unwrap_or(None);
            // `tenants`, when present, binds the caller: a non-empty list
            // of distinct tenant ids. Absent: every tenant.
            let tenants: Option<Option<Vec<String>>> = field("tenants").map(|v| {
                let list = v.as_array()?;
                let ids: Vec<String> = list
                    .iter()
                    .map(|t| t.as_str().filter(|t| gatehouse_core::is_valid_id(t)).map(str::to_owned))
                    .collect::<Option<_>>()?;
                let distinct = ids.iter().collect::<std::collections::BTreeSet<_>>().len() == ids.len();
                (!ids.is_empty() && distinct).then_some(ids)
            });
            let known = entry.as_table().is_some_and(|t| {
                t.keys().all(|k| ["name", "scopes", "token_sha256", "tenants"].contains(&k.as_str()))
            });
            let valid_name = !name.is_empty()
                && name.len() <= 64
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && !gatehouse_core::is_reserved_actor_name(name)
                && !callers.iter().any(|c| c.name() == name);
            let parsed = CallerToken::from_digest_hex(name, Vec::new(), digest);
            // One token, one caller: a digest listed twice would make one
            // token two callers (whichever the comparison meets last wins).
            if parsed.is_some()
                && let Some(first) = digests.iter().position(|d| d == digest)
            {
                self.problem(
                    names::CALLERS_FILE,
                    "secret_reused",
                    format!(
                        "caller {}: its token_sha256 is caller {}'s too; each caller needs its own token",
                        i + 1,
                        first + 1
                    ),
                );
                digests.push(String::new());
                continue;
            }
            digests.push(if parsed.is_some() { digest.to_owned() } else { String::new() });
            match (scopes, parsed, tenants) {
                (Some(scopes), Some(_), None) if valid_name && known => {
                    callers.extend(CallerToken::from_digest_hex(name, scopes, digest));
                }
                (Some(scopes), Some(_), Some(Some(tenants))) if valid_name && known => {
                    callers.extend(
                        CallerToken::from_digest_hex(name, scopes, digest).map(|c| c.bound_to(tenants)),
                    );
                }
                _ => self.problem(
                    names::CALLERS_FILE,
                    "invalid_value",
                    format!(
                        "caller {}: needs a unique name of [A-Za-z0-9_-] (not {:?}, in any case), scopes from {:?}, token_sha256 (64 lowercase hex digits), optionally tenants (a non-empty list of distinct tenant ids), nothing else",
                        i + 1,
                        gatehouse_core::RESERVED_ACTOR_NAMES,
                        Scope::ALL.map(Scope::as_str)
                    ),
                ),
            }
        }
        Callers::new(callers)
    }
}
