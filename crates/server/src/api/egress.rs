//! `/v1/egress/fetch`: the door for requests the platform makes on a run's
//! behalf (JSON, or raw with a streamed body), spending from the run's
//! grant, under its tenant's policy, with its leases injected and their
//! secrets scrubbed from the answer.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Query, State};
use axum::response::Response;
use gatehouse_capability::GrantClaims;
use gatehouse_core::{ErrorCode, PublicError, Reason, Refusal, RefusalKind, is_valid_id, new_id};
use gatehouse_egress::leases::mentions_placeholder;
use gatehouse_egress::proxy::PolicySource as _;
use gatehouse_ledger::{Operation, refusal_kind, spend};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{RouteTable, forbidden, refused};
use crate::http::{Answer as _, ApiError, RequestId, StrictJson, bad_request};
use crate::metrics::FetchPurpose;
use crate::state::AppState;

pub(super) fn routes(table: RouteTable) -> RouteTable {
    use axum::routing::post;
    table.route("/egress/fetch", post(egress_fetch)).route("/egress/fetch/raw", post(egress_fetch_raw))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FetchBody {
    #[serde(default)]
    grant: Option<String>,
    #[serde(default = "default_method")]
    method: String,
    url: String,
    #[serde(default)]
    headers: Vec<(String, String)>,
    #[serde(default)]
    body_base64: Option<String>,
    purpose: FetchPurpose,
    /// A webhook signing lease of the run: the delivery is signed with
    /// Standard Webhooks headers, the secret never leaving gatehouse.
    #[serde(default)]
    sign_with: Option<String>,
}

fn default_method() -> String {
    "GET".into()
}

/// A fetch on a run's behalf: its grant opened and a request spent.
struct RunFetch<'a> {
    state: &'a AppState,
    rid: &'a RequestId,
    claims: GrantClaims,
    fetcher: &'a gatehouse_egress::fetch::Fetcher,
    meter: gatehouse_egress::meter::EgressMeter,
    /// The run's lease generation, as its spend answered (`None`: unknown).
    lease_generation: Option<u64>,
}

impl<'a> RunFetch<'a> {
    /// Opens `grant` and spends one request from it for `fetch`.
    async fn start(
        state: &'a AppState,
        rid: &'a RequestId,
        grant: Option<&str>,
        fetch: &gatehouse_egress::fetch::FetchRequest,
    ) -> Result<Self, ApiError> {
        let (Some(fetcher), Some(ledger)) = (state.fetcher.as_ref(), state.plane.ledger.as_ref()) else {
            return Err(forbidden(rid));
        };
        let claims =
            state.plane.open_token(&rid.0, grant).answer(rid)?.map_err(|reason| refused(rid, reason))?;
        let meter = gatehouse_egress::meter::EgressMeter::new(
            ledger.clone(),
            &claims.grant_id,
            state.plane.clock.clone(),
            state.plane.settings.ledger_required,
        );
        let mut run = Self { state, rid, claims, fetcher, meter, lease_generation: None };
        match spend(
            ledger,
            &run.claims.grant_id,
            &Operation::Request,
            state.plane.clock.now(),
            state.plane.settings.ledger_required,
        )
        .await
        {
            Ok(spent) => run.lease_generation = spent.map(|s| s.lease_generation),
            // A request carrying a placeholder is told what became of its
            // credential, as at the proxy.
            Err(reason)
                if state.plane.door_leases.is_some() && mentions_placeholder(&fetch.headers, &fetch.url) =>
            {
                let reason = gatehouse_egress::leases::refused_before_the_leases(reason);
                run.note(RefusalKind::SecretRefused, reason, None, None, false);
                return Err(refused(rid, reason));
            }
            Err(reason) => {
                run.note(refusal_kind(reason), reason, None, None, false);
                return Err(refused(rid, reason));
            }
        }
        Ok(run)
    }

    /// The run's leases applied to the request (see `gatehouse_egress::leases`):
    /// its credential put in (and the answer to be scrubbed of it), or the
    /// request refused. Redirects stay on the origin, so the credential never
    /// follows one elsewhere. `body_in_hand`: the request's body is
    /// `fetch.body` (not streamed), and is looked at too.
    ///
    /// Returns the run's placeholders, which a streamed body is watched for
    /// (`gatehouse_egress::leases::WatchedBody`).
    async fn inject(
        &self,
        fetch: &mut gatehouse_egress::fetch::FetchRequest,
        body_in_hand: bool,
    ) -> Result<Vec<String>, ApiError> {
        let Some(source) = self.state.plane.door_leases.as_ref() else {
            return Ok(Vec::new());
        };
        // A URL that does not parse is refused by the fetch itself.
        let Ok(target) = gatehouse_egress::parse_url(&fetch.url) else {
            return Ok(Vec::new());
        };
        let host = target.host.to_string();
        let run = gatehouse_egress::leases::OfRun {
            grant_id: &self.claims.grant_id,
            run_id: &self.claims.exec_id,
            generation: self.lease_generation,
        };
        let outbound = gatehouse_egress::leases::Outbound {
            headers: &mut fetch.headers,
            path_and_query: &target.path_and_query,
            host: &host,
            over_tls: target.scheme == gatehouse_egress::Scheme::Https,
            body: body_in_hand.then_some(&fetch.body[..]),
        };
        let at_the_door = gatehouse_egress::leases::at_the_door(
            source.as_ref(),
            run,
            outbound,
            self.state.plane.clock.now(),
        );
        match at_the_door.await {
            Ok(injected) => {
                if let Some(lease_id) = injected.lease_id {
                    fetch.last_check = Some(self.lease_still_usable(lease_id, injected.generation));
                }
                fetch.scrub = injected.scrub;
                Ok(injected.watch)
            }
            Err(refusal) => {
                self.note_lease(refusal.reason, Some(host), refusal.lease_id);
                Err(refused(self.rid, refusal.reason))
            }
        }
    }

    /// The fetcher's last check for a request carrying `lease_id`'s secret:
    /// the fetch resolves its name after the credential went in, so the
    /// lease is checked again right before each hop goes out. A refusal
    /// there is recorded as the lease's.
    fn lease_still_usable(&self, lease_id: String, generation: u64) -> gatehouse_egress::leases::LastCheck {
        let state = self.state.clone();
        let grant_id = self.claims.grant_id.clone();
        let run_id = self.claims.exec_id.clone();
        gatehouse_egress::leases::LastCheck::new(move || {
            let (state, grant_id, run_id, lease_id) =
                (state.clone(), grant_id.clone(), run_id.clone(), lease_id.clone());
            Box::pin(async move {
                let Some(source) = state.plane.door_leases.as_ref() else { return Ok(()) };
                let now = state.plane.clock.now();
                gatehouse_egress::leases::still_usable(
                    source.as_ref(),
                    &grant_id,
                    &run_id,
                    &lease_id,
                    generation,
                    now,
                )
                .await
            })
        })
    }

    /// Signs a webhook delivery with the run's signing lease `lease_id`.
    async fn sign(
        &self,
        fetch: &mut gatehouse_egress::fetch::FetchRequest,
        lease_id: &str,
    ) -> Result<(), ApiError> {
        let source = self.state.plane.door_leases.as_ref().ok_or_else(|| forbidden(self.rid))?;
        let host = gatehouse_egress::parse_url(&fetch.url).map(|t| t.host.to_string()).unwrap_or_default();
        let secret = source
            .signing_secret(&self.claims.exec_id, self.claims.tenant_id.as_deref(), lease_id, &host)
            .await
            .map_err(|reason| {
                self.note_lease(reason, Some(host.clone()), Some(lease_id.to_owned()));
                refused(self.rid, reason)
            })?;
        let id = new_id("msg");
        let timestamp = self.state.plane.clock.now();
        let signature = gatehouse_capability::webhook_signature(&secret, &id, timestamp, &fetch.body);
        let headers = [
            ("webhook-id", id),
            ("webhook-timestamp", timestamp.to_string()),
            ("webhook-signature", signature),
        ];
        for (name, value) in headers {
            let value = http::HeaderValue::try_from(value)
                .map_err(|_| ApiError::new(ErrorCode::Internal, self.rid))?;
            fetch.headers.insert(name, value);
        }
        Ok(())
    }

    /// Records a lease refusal: a security refusal of the run's request.
    fn note_lease(&self, reason: Reason, host: Option<String>, lease_id: Option<String>) {
        self.state.plane.refusals.record_refusal(Refusal {
            kind: RefusalKind::SecretRefused,
            reason,
            tenant_id: self.claims.tenant_id.clone(),
            run_id: Some(self.claims.exec_id.clone()),
            request_id: Some(self.rid.0.clone()),
            host,
            rule: None,
            lease_id,
            dry_run: false,
            at: 0,
        });
    }

    /// Records a refusal (or, `dry_run`, what a dry-run policy would have refused).
    fn note(
        &self,
        kind: RefusalKind,
        reason: Reason,
        host: Option<String>,
        rule: Option<String>,
        dry_run: bool,
    ) {
        self.state.plane.refusals.record_refusal(Refusal {
            kind,
            reason,
            tenant_id: self.claims.tenant_id.clone(),
            run_id: Some(self.claims.exec_id.clone()),
            request_id: Some(self.rid.0.clone()),
            host,
            rule,
            lease_id: None,
            dry_run,
            at: 0,
        });
    }

    fn policy(&self) -> Result<std::sync::Arc<gatehouse_egress::Policy>, gatehouse_egress::PolicyError> {
        self.state.plane.policies.policy(self.claims.tenant_id.as_deref())
    }

    /// Records what the fetch came to and turns a refusal into the answer.
    fn finish<T>(
        &self,
        purpose: FetchPurpose,
        would_refuse: Vec<gatehouse_egress::fetch::FetchRefusal>,
        fetched: Result<T, gatehouse_egress::fetch::FetchRefusal>,
    ) -> Result<T, ApiError> {
        for dry in would_refuse {
            self.note(RefusalKind::EgressRefused, dry.reason, dry.host, dry.rule, true);
        }
        tracing::info!(
            request_id = %self.rid.0,
            run_id = %self.claims.exec_id,
            purpose = purpose.as_str(),
            allowed = fetched.is_ok(),
            "fetch"
        );
        match fetched {
            Ok(answer) => {
                self.state.metrics.record_fetch(purpose);
                Ok(answer)
            }
            Err(refusal) => {
                self.note(
                    gatehouse_egress::meter::door_refusal_kind(refusal.reason),
                    refusal.reason,
                    refusal.host,
                    refusal.rule,
                    false,
                );
                let code = match refusal.reason {
                    Reason::UpstreamUnreachable
                    | Reason::UpstreamTimeout
                    | Reason::TlsFailed
                    | Reason::UpstreamBadResponse
                    | Reason::ContentEncodingInvalid
                    | Reason::ResponseTooLarge => ErrorCode::BadGateway,
                    Reason::HeaderNotAllowed => ErrorCode::BadRequest,
                    r => r.refusal_code(),
                };
                Err(ApiError(PublicError::new(code, self.rid.0.clone()).with_reason(refusal.reason)))
            }
        }
    }
}

/// The upstream request's method and headers, checked.
fn fetch_request(
    rid: &RequestId,
    method: &str,
    url: String,
    headers: impl IntoIterator<Item = (String, String)>,
    purpose: FetchPurpose,
) -> Result<gatehouse_egress::fetch::FetchRequest, ApiError> {
    let method = http::Method::from_bytes(method.as_bytes())
        .map_err(|_| bad_request(rid, "method is not an HTTP method"))?;
    let mut map = http::HeaderMap::new();
    for (name, value) in headers {
        let (Ok(name), Ok(value)) =
            (http::HeaderName::from_bytes(name.trim().as_bytes()), http::HeaderValue::from_str(value.trim()))
        else {
            return Err(bad_request(rid, "headers must be valid HTTP header names and values"));
        };
        map.append(name, value);
    }
    let purpose = match purpose {
        FetchPurpose::Webhook => gatehouse_egress::Purpose::Webhook,
        _ => gatehouse_egress::Purpose::Request,
    };
    Ok(gatehouse_egress::fetch::FetchRequest {
        method,
        url,
        headers: map,
        body: bytes::Bytes::new(),
        purpose,
        scrub: Default::default(),
        last_check: None,
    })
}

/// A request the platform makes on a run's behalf, through the door: the
/// run's grant is opened and spent, the tenant's policy and the address guard
/// decide every hop, and the upstream answer comes back whole (capped).
async fn egress_fetch(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    StrictJson(req): StrictJson<FetchBody>,
) -> Result<Json<Value>, ApiError> {
    use base64::Engine as _;
    let mut fetch = fetch_request(&rid, &req.method, req.url, req.headers, req.purpose)?;
    let run = RunFetch::start(&state, &rid, req.grant.as_deref(), &fetch).await?;
    if let Some(b) = &req.body_base64 {
        let body = base64::engine::general_purpose::STANDARD
            .decode(b)
            .map_err(|_| bad_request(&rid, "body_base64 is not base64"))?;
        fetch.body = body.into();
    }
    run.inject(&mut fetch, true).await?;
    if let Some(lease_id) = &req.sign_with {
        if req.purpose != FetchPurpose::Webhook || !is_valid_id(lease_id) {
            return Err(bad_request(&rid, "sign_with is a webhook signing lease id, for purpose webhook"));
        }
        run.sign(&mut fetch, lease_id).await?;
    }
    let policy = run.policy();
    let mut would_refuse = Vec::new();
    let fetched =
        run.fetcher.fetch_for_run(policy.as_deref(), fetch, Some(&run.meter), &mut would_refuse).await;
    let response = run.finish(req.purpose, would_refuse, fetched)?;
    let headers: Vec<(String, String)> = response
        .headers
        .iter()
        .filter_map(|(n, v)| v.to_str().ok().map(|v| (n.as_str().to_owned(), v.to_owned())))
        .collect();
    Ok(Json(json!({
        "status": response.status.as_u16(),
        "headers": headers,
        "body_base64": base64::engine::general_purpose::STANDARD.encode(&response.body),
        "redirects": response.redirects,
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFetchQuery {
    url: String,
    #[serde(default = "default_method")]
    method: String,
    purpose: FetchPurpose,
}

/// The header that carries the run's grant on the raw route.
const RAW_GRANT_HEADER: &str = "x-gatehouse-grant";
/// Each header to send upstream, as `name: value` (repeated).
const RAW_FORWARD_HEADER: &str = "x-gatehouse-header";

/// `POST /v1/egress/fetch/raw`: the same fetch with the bodies streamed both
/// ways, never held whole. The request body is the upstream body; the
/// answer is the upstream's status, headers and body (decoded, capped, cut
/// off with the connection where a cap or the budget ends it), with
/// `x-gatehouse-redirects`. Headers of the upstream's own named
/// `x-gatehouse-*` are dropped, so a gatehouse refusal (which carries
/// `x-gatehouse-reason` and the JSON error) cannot be impersonated.
async fn egress_fetch_raw(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    query: Result<Query<RawFetchQuery>, QueryRejection>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    let Ok(Query(q)) = query else {
        return Err(bad_request(&rid, "give url, purpose and optionally method in the query string"));
    };
    let headers = request.headers();
    let grant = headers.get(RAW_GRANT_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut forward = Vec::new();
    for value in headers.get_all(RAW_FORWARD_HEADER) {
        let pair = value.to_str().ok().and_then(|v| v.split_once(':'));
        let Some((name, value)) = pair else {
            return Err(bad_request(&rid, "x-gatehouse-header is `name: value`"));
        };
        forward.push((name.to_owned(), value.to_owned()));
    }
    let mut fetch = fetch_request(&rid, &q.method, q.url, forward, q.purpose)?;
    let run = RunFetch::start(&state, &rid, grant.as_deref(), &fetch).await?;
    let watch = run.inject(&mut fetch, false).await?;
    let body = match watch.is_empty() {
        true => gatehouse_egress::fetch::stream_body(request.into_body()),
        false => gatehouse_egress::fetch::stream_body(gatehouse_egress::leases::WatchedBody::new(
            request.into_body(),
            watch,
        )),
    };
    let policy = run.policy();
    let mut would_refuse = Vec::new();
    let fetched =
        run.fetcher.fetch_streamed(policy.as_deref(), fetch, body, &run.meter, &mut would_refuse).await;
    let answer = run.finish(q.purpose, would_refuse, fetched)?;
    let mut response = Response::new(axum::body::Body::new(answer.body));
    *response.status_mut() = answer.status;
    let out = response.headers_mut();
    for (name, value) in &answer.headers {
        if !name.as_str().starts_with("x-gatehouse-") {
            out.append(name.clone(), value.clone());
        }
    }
    out.insert("x-gatehouse-redirects", http::HeaderValue::from(u16::from(answer.redirects)));
    Ok(response)
}
