//! The OSV API client: `POST /v1/querybatch` for the ids that affect each
//! package version, then `GET /v1/vulns/{id}` once per id.
//!
//! It opens no connection itself: a [`Transport`] carries each request, and
//! gatehouse's transport is the egress crate's fetch client (the one
//! outbound door), so OSV traffic gets the same checks as any other.
//!
//! Fail closed: a query that still fails after the retries, a malformed
//! answer, or a result count that does not match the batch is an error for
//! the whole scan — never a silent "no findings".

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::package::Package;

/// The public OSV API.
pub const DEFAULT_BASE_URL: &str = "https://api.osv.dev";
/// OSV accepts at most 1000 queries per batch.
pub const MAX_BATCH: usize = 1000;
/// Longest answer read.
const MAX_RESPONSE: usize = 32 << 20;

/// An HTTP answer.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Body.
    pub body: Vec<u8>,
}

/// A boxed request future.
pub type TransportFuture<'a> = Pin<Box<dyn Future<Output = Result<Response, String>> + Send + 'a>>;

/// Carries requests to OSV. `Err` is a transport failure (refused by the
/// door, unreachable, timed out), described without secrets.
pub trait Transport: Send + Sync {
    /// `POST url` with a JSON body.
    fn post_json<'a>(&'a self, url: &'a str, body: Vec<u8>) -> TransportFuture<'a>;
    /// `GET url`.
    fn get<'a>(&'a self, url: &'a str) -> TransportFuture<'a>;
}

/// Why the OSV lookup failed. Each makes the scan `error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OsvError {
    /// The request failed after every retry.
    #[error("OSV unreachable: {0}")]
    Unreachable(String),
    /// OSV answered with an error status after every retry.
    #[error("OSV answered {0}")]
    Status(u16),
    /// The answer is not what the API documents.
    #[error("OSV's answer is malformed: {0}")]
    Malformed(String),
}

impl OsvError {
    /// A stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unreachable(_) => "osv_unreachable",
            Self::Status(_) => "osv_error_status",
            Self::Malformed(_) => "osv_malformed",
        }
    }
}

#[derive(Serialize)]
struct QueryPackage<'a> {
    name: &'a str,
    ecosystem: &'a str,
}

/// One OSV query: a package at a version, or a package at a commit (the
/// API's commit query, which OSV answers from the repositories' history;
/// `commit` and `version` are one or the other, `package` may go with either).
#[derive(Serialize)]
struct Query<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    package: Option<QueryPackage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    commit: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    page_token: Option<&'a str>,
}

/// What one query asks about a package: its version, or its commit.
#[derive(Clone, Copy)]
enum Ask {
    Version,
    Commit,
}

#[derive(Serialize)]
struct Batch<'a> {
    queries: Vec<Query<'a>>,
}

#[derive(Deserialize)]
struct BatchAnswer {
    results: Vec<QueryAnswer>,
}

#[derive(Deserialize, Default)]
struct QueryAnswer {
    #[serde(default)]
    vulns: Vec<VulnRef>,
    #[serde(default)]
    next_page_token: Option<String>,
}

#[derive(Deserialize)]
struct VulnRef {
    id: String,
}

/// The client's settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The API root, without a trailing slash [`DEFAULT_BASE_URL`].
    pub base_url: String,
    /// Attempts per request (the first one included).
    pub attempts: u32,
    /// The first retry's delay; each further retry doubles it.
    pub backoff: Duration,
    /// Queries per batch (at most [`MAX_BATCH`]).
    pub batch_size: usize,
    /// Pages followed per query before giving up (a runaway `next_page_token`).
    pub max_pages: usize,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.to_owned(),
            attempts: 4,
            backoff: Duration::from_millis(250),
            batch_size: MAX_BATCH,
            max_pages: 100,
        }
    }
}

/// The OSV client.
pub struct OsvClient<T> {
    transport: T,
    config: ClientConfig,
}

/// Whether a status is worth retrying.
fn transient(status: u16) -> bool {
    status == 429 || status == 408 || status >= 500
}

fn ids_are_sane(id: &str) -> bool {
    !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
}

impl<T: Transport> OsvClient<T> {
    /// A client over `transport`.
    pub fn new(transport: T, mut config: ClientConfig) -> Self {
        config.batch_size = config.batch_size.clamp(1, MAX_BATCH);
        config.attempts = config.attempts.max(1);
        config.base_url = config.base_url.trim_end_matches('/').to_owned();
        Self { transport, config }
    }

    async fn send(&self, url: &str, body: Option<&[u8]>) -> Result<Vec<u8>, OsvError> {
        let mut delay = self.config.backoff;
        let mut last = OsvError::Unreachable("no attempt".into());
        for attempt in 0..self.config.attempts {
            if attempt > 0 {
                tokio::time::sleep(delay).await;
                delay = delay.saturating_mul(2);
            }
            let answer = match body {
                Some(body) => self.transport.post_json(url, body.to_vec()).await,
                None => self.transport.get(url).await,
            };
            match answer {
                Ok(r) if (200..300).contains(&r.status) => {
                    if r.body.len() > MAX_RESPONSE {
                        return Err(OsvError::Malformed("answer too large".into()));
                    }
                    return Ok(r.body);
                }
                Ok(r) if transient(r.status) => last = OsvError::Status(r.status),
                Ok(r) => return Err(OsvError::Status(r.status)),
                Err(e) => last = OsvError::Unreachable(e),
            }
        }
        Err(last)
    }

    /// The advisory ids affecting each package, in the packages' order: by
    /// its version, or, for a git dependency whose lockfile records no
    /// version, by its commit. (A version is what the lockfile says is
    /// installed and what every advisory range is written in; a commit
    /// query for a git dependency that has one would only repeat it, and a
    /// mirror without the repositories' history could not answer it.)
    pub async fn query_ids(&self, packages: &[Package]) -> Result<Vec<BTreeSet<String>>, OsvError> {
        let url = format!("{}/v1/querybatch", self.config.base_url);
        let mut out = vec![BTreeSet::new(); packages.len()];
        // (package index, what is asked, page token) still to ask about.
        let mut todo: Vec<(usize, Ask, Option<String>)> = Vec::with_capacity(packages.len());
        for (i, p) in packages.iter().enumerate() {
            match (p.version.is_empty(), &p.commit) {
                (false, _) => todo.push((i, Ask::Version, None)),
                (true, Some(_)) => todo.push((i, Ask::Commit, None)),
                // Nothing to ask by: the scan reports it (`package_no_version`).
                (true, None) => {}
            }
        }
        let mut pages = 0;
        while !todo.is_empty() {
            if pages > self.config.max_pages {
                return Err(OsvError::Malformed("too many result pages".into()));
            }
            pages += 1;
            let mut next = Vec::new();
            for chunk in todo.chunks(self.config.batch_size) {
                let batch = Batch {
                    queries: chunk
                        .iter()
                        .map(|(i, ask, token)| {
                            let p = &packages[*i];
                            match ask {
                                Ask::Version => Query {
                                    package: Some(QueryPackage {
                                        name: &p.name,
                                        ecosystem: p.ecosystem.as_str(),
                                    }),
                                    version: Some(&p.version),
                                    commit: None,
                                    page_token: token.as_deref(),
                                },
                                Ask::Commit => Query {
                                    package: Some(QueryPackage {
                                        name: &p.name,
                                        ecosystem: p.ecosystem.as_str(),
                                    }),
                                    version: None,
                                    commit: p.commit.as_deref(),
                                    page_token: token.as_deref(),
                                },
                            }
                        })
                        .collect(),
                };
                let body = serde_json::to_vec(&batch).map_err(|e| OsvError::Malformed(e.to_string()))?;
                let answer = self.send(&url, Some(&body)).await?;
                let answer: BatchAnswer = serde_json::from_slice(&answer).map_err(|_| {
                    OsvError::Malformed("querybatch answer is not the documented JSON".into())
                })?;
                if answer.results.len() != chunk.len() {
                    // A partial batch: refuse rather than guess which query it left out.
                    return Err(OsvError::Malformed(format!(
                        "{} results for {} queries",
                        answer.results.len(),
                        chunk.len()
                    )));
                }
                for ((i, ask, _), result) in chunk.iter().zip(answer.results) {
                    for v in result.vulns {
                        if !ids_are_sane(&v.id) {
                            return Err(OsvError::Malformed("an advisory id is not an OSV id".into()));
                        }
                        out[*i].insert(v.id);
                    }
                    if let Some(token) = result.next_page_token.filter(|t| !t.is_empty()) {
                        next.push((*i, *ask, Some(token)));
                    }
                }
            }
            todo = next;
        }
        Ok(out)
    }

    /// Each advisory's full JSON, fetched once per id.
    pub async fn fetch_vulns(&self, ids: &BTreeSet<String>) -> Result<BTreeMap<String, Vec<u8>>, OsvError> {
        let mut out = BTreeMap::new();
        for id in ids {
            let url = format!("{}/v1/vulns/{id}", self.config.base_url);
            out.insert(id.clone(), self.send(&url, None).await?);
        }
        Ok(out)
    }
}
