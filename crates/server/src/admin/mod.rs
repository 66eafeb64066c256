//! The Security settings page (`/admin`, worker and `all` roles): a person
//! signs in and sees, per tenant, the egress policy (edit, dry run, test a
//! URL), one-click Allow for hosts the tenant needs, the dependency gate and
//! its newest scans, the content scanner, runs (Cancel), live leases
//! (Revoke), the kill switch, emergency revoke, and recent refusals.
//!
//! Server-rendered HTML (askama: compile-time checked, auto-escaped) that
//! works without JavaScript. Every change goes through the same functions
//! as the API and is audited under the person's name (`person:NAME`).
//!
//! Sessions live in the store (a token's SHA-256, never the token), so any
//! worker node serves a signed-in person and sign-out ends the session
//! everywhere. Each is bound to the password hash it began under (a keyed
//! digest stored with it): a new hash, even after a restart, ends every
//! session begun under the old one, and "sign out everywhere" ends them all. Each form carries an anti-forgery token derived from the
//! session's; the cookie is `HttpOnly`, `SameSite=Strict`, and `Secure`
//! unless the node listens on loopback. Responses forbid framing and every
//! script (the Content-Security-Policy allows none at all).

mod actions;
mod artifacts;
mod client;
mod credentials;
mod pages;
mod policy;
mod throttle;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use askama::Template;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Extension, FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use gatehouse_capability::{AdminPasswordHash, SessionToken};
use gatehouse_core::{ErrorCode, Reason, RefusalKind, UnixTime, is_valid_id};
use gatehouse_store::StoreError;
use http::{HeaderValue, StatusCode, header};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::http::{ApiError, RequestId, api_error, request_id_of};
use crate::state::AppState;

pub use throttle::{Admission, ClientKey, Outcome, SignInThrottle, Ticket};

/// A session's absolute lifetime.
pub const SESSION_LIFETIME_SECS: i64 = 8 * 3600;
/// A session unused this long has ended.
pub const SESSION_IDLE_SECS: i64 = 30 * 60;
/// Argon2id verifications at once (each takes ~19 MiB and tens of
/// milliseconds): sign-in attempts cannot take the node's memory or cores.
const CONCURRENT_SIGN_INS: usize = 2;

/// Every page's Content-Security-Policy: nothing but this origin's style
/// sheet; no script at all, no framing, forms post only here.
const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
                   frame-ancestors 'none'; base-uri 'none'";

/// The settings page's own state.
pub struct Admin {
    password: AdminPasswordHash,
    secure_cookie: bool,
    /// Peers whose `X-Forwarded-For` names the client.
    trusted_proxies: Vec<ipnet::IpNet>,
    throttle: Mutex<SignInThrottle>,
    hashing: tokio::sync::Semaphore,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin").field("secure_cookie", &self.secure_cookie).finish_non_exhaustive()
    }
}

impl Admin {
    /// The page, checking sign-ins against `password`. Off loopback the
    /// cookie is `Secure`, so a browser sends it over HTTPS only. A sign-in
    /// whose connection comes from one of `trusted_proxies` is counted
    /// against the client its `X-Forwarded-For` names.
    pub fn new(
        password: AdminPasswordHash,
        listens_on_loopback: bool,
        trusted_proxies: Vec<ipnet::IpNet>,
    ) -> Self {
        Self {
            password,
            secure_cookie: !listens_on_loopback,
            trusted_proxies,
            throttle: Mutex::new(SignInThrottle::default()),
            hashing: tokio::sync::Semaphore::new(CONCURRENT_SIGN_INS),
        }
    }

    /// The throttle's state. Every change to it is a few counters, so a
    /// panic elsewhere never leaves it unusable: sign-in stays possible.
    fn throttle(&self) -> MutexGuard<'_, SignInThrottle> {
        self.throttle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn cookie_name(&self) -> &'static str {
        // A `__Secure-` name is one no plain-HTTP page can set.
        if self.secure_cookie { "__Secure-gatehouse_admin" } else { "gatehouse_admin" }
    }

    fn cookie(&self, value: &str, max_age: i64) -> String {
        let secure = if self.secure_cookie { "; Secure" } else { "" };
        format!(
            "{}={value}; Path=/admin; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}",
            self.cookie_name()
        )
    }
}

/// The page's routes, when this node serves it (a store and a password).
pub fn router(state: &AppState) -> Option<Router<AppState>> {
    let page = state.admin_page.as_ref()?;
    state.plane.store.as_ref()?;
    let admin =
        Arc::new(Admin::new(page.password.clone(), page.listens_on_loopback, page.trusted_proxies.clone()));
    let pages = Router::new()
        .route("/admin", get(pages::index))
        .route("/admin/login", get(pages::login_page).post(sign_in))
        .route("/admin/logout", post(sign_out))
        .route("/admin/logout-everywhere", post(sign_out_everywhere))
        .route("/admin/assets/admin.css", get(stylesheet))
        .route("/admin/tenants", get(pages::open_tenant))
        .route("/admin/tenants/{tenant_id}", get(pages::tenant_page))
        .route("/admin/tenants/{tenant_id}/policy", post(policy::save_policy))
        .route("/admin/tenants/{tenant_id}/policy/confirm", post(policy::confirm_policy))
        .route("/admin/tenants/{tenant_id}/test-url", post(policy::test_url))
        .route("/admin/tenants/{tenant_id}/allow", post(policy::preview_allow))
        .route("/admin/tenants/{tenant_id}/allow/confirm", post(policy::confirm_allow))
        .route("/admin/tenants/{tenant_id}/gate", post(actions::save_gate))
        .route("/admin/tenants/{tenant_id}/kill-switch", post(actions::kill_switch))
        .route("/admin/tenants/{tenant_id}/runs/{run_id}/cancel", post(actions::cancel_run))
        .route("/admin/tenants/{tenant_id}/leases/{lease_id}/revoke", post(actions::revoke_lease))
        .route("/admin/tenants/{tenant_id}/proposals/{proposal_id}/decide", post(actions::decide_proposal))
        .route(
            "/admin/tenants/{tenant_id}/credentials/{credential_id}/test",
            post(credentials::test_credential),
        )
        .route("/admin/tenants/{tenant_id}/runs/{run_id}/artifacts", get(artifacts::run_artifacts))
        .route("/admin/emergency-revoke", get(actions::emergency_page).post(actions::emergency_revoke))
        .layer(Extension(admin))
        .layer(middleware::from_fn(page_headers));
    Some(pages)
}

/// The page's own state, which [`router`] puts in every request it serves.
fn admin(extensions: &http::Extensions) -> Result<Arc<Admin>, PageError> {
    extensions.get::<Arc<Admin>>().cloned().ok_or(PageError::NotFound)
}

/// Headers every page answers with.
async fn page_headers(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
    headers.insert("cross-origin-resource-policy", HeaderValue::from_static("same-origin"));
    response
}

async fn stylesheet() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], include_str!("../../assets/admin.css"))
        .into_response()
}

/// A page as a response.
fn page(status: StatusCode, template: &impl Template) -> Response {
    match template.render() {
        Ok(body) => (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "a settings page did not render");
            (StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
        }
    }
}

/// Why a page could not be served, as a person sees it.
#[derive(Debug)]
pub enum PageError {
    /// No session cookie at all: sign in.
    SignIn,
    /// A session cookie that matches no live session (ended, idle, signed
    /// out elsewhere, or not a token at all): sign in again.
    Expired,
    /// A form without this session's anti-forgery token.
    Forged,
    /// Not a tenant, run or lease this page knows.
    NotFound,
    /// The request itself is wrong; the text says how.
    Bad(&'static str),
    /// An operation refused or failed, with the API's code and reason.
    Api(ApiError),
}

impl From<ApiError> for PageError {
    fn from(e: ApiError) -> Self {
        Self::Api(e)
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let message = |status, heading, text: &str, code: Option<String>, request_id: Option<String>| {
            page(
                status,
                &pages::MessagePage { heading, text: text.to_owned(), code, request_id, back: "/admin" },
            )
        };
        match self {
            Self::SignIn => Redirect::to("/admin/login").into_response(),
            Self::Expired => Redirect::to("/admin/login?expired=1").into_response(),
            Self::Forged => message(
                StatusCode::FORBIDDEN,
                "Form refused",
                "This form did not come from this page in your session. Nothing was changed: reload the page and try again.",
                Some(Reason::AdminCsrfInvalid.as_str().to_owned()),
                None,
            ),
            Self::NotFound => {
                message(StatusCode::NOT_FOUND, "Not found", "There is nothing here.", None, None)
            }
            Self::Bad(text) => message(StatusCode::BAD_REQUEST, "Not done", text, None, None),
            Self::Api(ApiError(e)) => {
                let status =
                    StatusCode::from_u16(e.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                let code = e.reason.map_or_else(|| e.code.as_str().to_owned(), |r| r.as_str().to_owned());
                let text = pages::explain(e.reason).unwrap_or(e.message);
                message(status, "Not done", text, Some(code), Some(e.request_id))
            }
        }
    }
}

/// The signed-in person making a request.
pub struct Person {
    /// As the audit log names them: `person:NAME`.
    pub actor: String,
    /// The session's token (for the forms' anti-forgery token).
    token: SessionToken,
    /// The request's id.
    pub rid: RequestId,
}

impl Person {
    /// The anti-forgery token this session's forms carry.
    pub fn csrf(&self) -> String {
        self.token.csrf_token()
    }
}

impl FromRequestParts<AppState> for Person {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, PageError> {
        let rid = parts
            .extensions
            .get::<RequestId>()
            .cloned()
            .unwrap_or_else(|| RequestId(gatehouse_core::new_id("req")));
        let admin = admin(&parts.extensions)?;
        let refused = || {
            state.plane.refusals.record(
                RefusalKind::AuthRefused,
                Reason::AdminSessionInvalid,
                None,
                None,
                Some(&rid.0),
            );
            PageError::Expired
        };
        let token = match session_cookie(&parts.headers, admin.cookie_name()) {
            SessionCookie::Absent => return Err(PageError::SignIn),
            SessionCookie::Unusable => return Err(refused()),
            SessionCookie::Token(token) => token,
        };
        let store = state.plane.store().map_err(|e| PageError::Api(api_error(&rid, e)))?;
        let session = store
            .admin_session(
                &token.digest(),
                &token.password_binding(&admin.password),
                state.plane.clock.now(),
                SESSION_IDLE_SECS,
            )
            .await
            .map_err(|e| store_failure(&rid, e))?;
        match session {
            Some(s) => Ok(Self { actor: s.person, token, rid }),
            None => Err(refused()),
        }
    }
}

/// What a request's cookies say about a session.
enum SessionCookie {
    /// No cookie of the page's name: a first visit, or signed out here.
    Absent,
    /// One (or more) of the page's name, but not exactly one well-formed
    /// token: nothing is looked up.
    Unusable,
    /// Exactly one cookie of the page's name, of the token's exact shape.
    Token(SessionToken),
}

/// The session token a request's cookie carries: exactly one cookie of the
/// page's name, of the token's exact shape, or none.
fn session_cookie(headers: &http::HeaderMap, name: &str) -> SessionCookie {
    let mut found = None;
    let mut seen = false;
    for value in headers.get_all(header::COOKIE) {
        let Ok(value) = value.to_str() else {
            // A header that is not text may hide the page's cookie.
            return SessionCookie::Unusable;
        };
        for pair in value.split(';') {
            let Some((key, value)) = pair.trim().split_once('=') else { continue };
            if key == name {
                if seen {
                    // Two: refused, never a guess at which one counts.
                    return SessionCookie::Unusable;
                }
                seen = true;
                found = Some(value.trim());
            }
        }
    }
    match found {
        None => SessionCookie::Absent,
        Some(text) => SessionToken::from_cookie(text).map_or(SessionCookie::Unusable, SessionCookie::Token),
    }
}

/// A form posted by a signed-in person, its anti-forgery token checked
/// before anything in it is used. Every changing route takes one, so none
/// can forget the check.
pub struct Submitted<T> {
    /// Who.
    pub person: Person,
    /// What they sent.
    pub form: T,
}

#[derive(Deserialize)]
struct Csrf {
    #[serde(default)]
    csrf: String,
}

impl<T: DeserializeOwned> FromRequest<AppState> for Submitted<T> {
    type Rejection = PageError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, PageError> {
        let (mut parts, body) = req.into_parts();
        let person = Person::from_request_parts(&mut parts, state).await?;
        // Browsers say where a form came from; another site's is refused
        // even before the token is looked at.
        let cross_site = is_cross_site(&parts.headers);
        let bytes = Bytes::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(|_| PageError::Bad("the form is too large"))?;
        let csrf: Csrf = serde_urlencoded_from(&bytes).ok_or(PageError::Forged)?;
        if cross_site || !person.token.csrf_matches(&csrf.csrf) {
            state.plane.refusals.record(
                RefusalKind::AuthRefused,
                Reason::AdminCsrfInvalid,
                None,
                None,
                Some(&person.rid.0),
            );
            return Err(PageError::Forged);
        }
        let form = serde_urlencoded_from(&bytes)
            .ok_or(PageError::Bad("the form does not have the expected fields"))?;
        Ok(Self { person, form })
    }
}

/// A browser's word that a request comes from another site
/// (`Sec-Fetch-Site: cross-site`).
fn is_cross_site(headers: &http::HeaderMap) -> bool {
    headers.get("sec-fetch-site").is_some_and(|v| v.as_bytes() == b"cross-site")
}

fn serde_urlencoded_from<T: DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    serde_urlencoded::from_bytes(bytes).ok()
}

// ---- signing in and out ----

#[derive(Deserialize)]
struct SignInForm {
    #[serde(default)]
    person: String,
    #[serde(default)]
    password: String,
}

async fn sign_in(State(state): State<AppState>, req: Request) -> Response {
    let rid = request_id_of(&req);
    let admin = match admin(req.extensions()) {
        Ok(admin) => admin,
        Err(e) => return e.into_response(),
    };
    let peer = req.extensions().get::<gatehouse_listener::PeerAddr>().map(|p| p.0);
    let client = client::client_address(peer, req.headers(), &admin.trusted_proxies);
    if is_cross_site(req.headers()) {
        // Another site making a browser sign in: refused (it would sign the
        // person in to a session of the other site's choosing).
        state.plane.refusals.record(
            RefusalKind::AuthRefused,
            Reason::AdminCsrfInvalid,
            None,
            None,
            Some(&rid.0),
        );
        return PageError::Forged.into_response();
    }
    let bytes = Bytes::from_request(req, &state).await.ok();
    let Some(form) = bytes.and_then(|b| serde_urlencoded_from::<SignInForm>(&b)) else {
        return pages::login(StatusCode::BAD_REQUEST, "Give your name and the password.", "");
    };
    let person = form.person.trim().to_owned();
    if !gatehouse_plane::is_person_name(&person) {
        return pages::login(
            StatusCode::BAD_REQUEST,
            "Your name is 1 to 64 letters, digits, dots, underscores, hyphens or @.",
            "",
        );
    }
    // The attempt is reserved before the (slow) check, in the same step as
    // the decision: attempts arriving together cannot all pass the check.
    let admission = admin.throttle().admit(client, std::time::Instant::now());
    let (mut reservation, wait) = match admission {
        Admission::Check { ticket, wait } => {
            (Reservation { admin: &admin, ticket: Some(ticket), checking: false }, wait)
        }
        Admission::Refused => {
            state.plane.refusals.record(
                RefusalKind::AuthRefused,
                Reason::AdminSignInThrottled,
                None,
                None,
                Some(&rid.0),
            );
            return pages::login(
                StatusCode::TOO_MANY_REQUESTS,
                "Too many sign-ins failed lately. Wait a few minutes and try again.",
                &person,
            );
        }
    };
    if !wait.is_zero() {
        // Sign-ins are slowed (many failures in all): this one waits its turn.
        tokio::time::sleep(wait).await;
    }
    if !verify_password(&admin, &mut reservation, form.password).await {
        reservation.settle(Outcome::Failed);
        tracing::warn!(request_id = %rid.0, client = %ClientKey::of(client), "settings page sign-in failed");
        state.plane.refusals.record(
            RefusalKind::AuthRefused,
            Reason::AdminSignInFailed,
            None,
            None,
            Some(&rid.0),
        );
        return pages::login(StatusCode::UNAUTHORIZED, "That password is not right.", &person);
    }
    reservation.settle(Outcome::Succeeded);
    let Ok(token) = SessionToken::generate() else {
        return PageError::Api(ApiError::new(ErrorCode::Internal, &rid)).into_response();
    };
    let now: UnixTime = state.plane.clock.now();
    let actor = format!("person:{person}");
    let Some(store) = state.plane.store.as_ref() else { return PageError::NotFound.into_response() };
    let binding = token.password_binding(&admin.password);
    if let Err(e) =
        store.create_admin_session(&token.digest(), &binding, &actor, now, now + SESSION_LIFETIME_SECS).await
    {
        return store_failure(&rid, e).into_response();
    }
    tracing::info!(request_id = %rid.0, person = %actor, "signed in to the settings page");
    let mut response = Redirect::to("/admin").into_response();
    if let Ok(cookie) = HeaderValue::from_str(&admin.cookie(token.expose(), SESSION_LIFETIME_SECS)) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

/// A sign-in's reserved check. Settled with its outcome. Dropped unsettled
/// (the request went away or timed out): once the password was handed to
/// the check it counts as a failure, so walking away from a check never
/// gives its place back; before that (waiting for a turn or a hashing
/// slot) nothing was guessed, and the place is given back.
struct Reservation<'a> {
    admin: &'a Admin,
    ticket: Option<Ticket>,
    /// Whether the password has been handed to the check.
    checking: bool,
}

impl Reservation<'_> {
    fn settle(mut self, outcome: Outcome) {
        if let Some(ticket) = self.ticket.take() {
            self.admin.throttle().settle(ticket, outcome, std::time::Instant::now());
        }
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            let outcome = if self.checking { Outcome::Failed } else { Outcome::Abandoned };
            self.admin.throttle().settle(ticket, outcome, std::time::Instant::now());
        }
    }
}

/// Checks a password on a blocking thread, a few at a time, marking the
/// reservation as checking once the password is handed over.
async fn verify_password(admin: &Admin, reservation: &mut Reservation<'_>, password: String) -> bool {
    let Ok(_permit) = admin.hashing.acquire().await else { return false };
    let hash = admin.password.clone();
    let password = zeroize::Zeroizing::new(password);
    reservation.checking = true;
    tokio::task::spawn_blocking(move || hash.verify(&password)).await.unwrap_or(false)
}

async fn sign_out(
    State(state): State<AppState>,
    Extension(admin): Extension<Arc<Admin>>,
    submitted: Result<Submitted<Csrf>, PageError>,
) -> Response {
    let submitted = match submitted {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    if let Some(store) = state.plane.store.as_ref()
        && let Err(e) =
            store.end_admin_session(&submitted.person.token.digest(), state.plane.clock.now()).await
    {
        return store_failure(&submitted.person.rid, e).into_response();
    }
    let mut response = Redirect::to("/admin/login").into_response();
    if let Ok(cookie) = HeaderValue::from_str(&admin.cookie("", 0)) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

/// Ends every session of the page, this one included (someone may hold a
/// session they should not: a shared machine, a leaked cookie), audited as
/// `admin.sign_out_everywhere` under the person.
async fn sign_out_everywhere(
    State(state): State<AppState>,
    Extension(admin): Extension<Arc<Admin>>,
    submitted: Result<Submitted<Csrf>, PageError>,
) -> Response {
    let submitted = match submitted {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    let person = &submitted.person;
    if let Some(store) = state.plane.store.as_ref() {
        match store.end_all_admin_sessions(&person.actor, state.plane.clock.now(), SESSION_IDLE_SECS).await {
            Ok(ended) => tracing::info!(
                request_id = %person.rid.0,
                person = %person.actor,
                sessions = ended,
                "signed every session of the settings page out"
            ),
            Err(e) => return store_failure(&person.rid, e).into_response(),
        }
    }
    let mut response = Redirect::to("/admin/login").into_response();
    if let Ok(cookie) = HeaderValue::from_str(&admin.cookie("", 0)) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

/// A tenant id from the path, or not found (never echoed).
fn tenant_path(path: Result<Path<String>, PathRejection>) -> Result<String, PageError> {
    match path {
        Ok(Path(id)) if is_valid_id(&id) => Ok(id),
        _ => Err(PageError::NotFound),
    }
}

/// Two ids from the path.
fn ids_path(path: Result<Path<(String, String)>, PathRejection>) -> Result<(String, String), PageError> {
    match path {
        Ok(Path((a, b))) if is_valid_id(&a) && is_valid_id(&b) => Ok((a, b)),
        _ => Err(PageError::NotFound),
    }
}

/// A query, or a plain "bad request" page (axum's own text may quote it).
fn query_of<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, PageError> {
    query.map(|Query(q)| q).map_err(|_| PageError::Bad("the address has a query this page does not take"))
}

/// A store failure as a page.
fn store_failure(rid: &RequestId, e: StoreError) -> PageError {
    PageError::Api(api_error(rid, e.into()))
}

/// A plane operation's failure as a page.
fn plane_failure(rid: &RequestId, e: gatehouse_plane::PlaneError) -> PageError {
    PageError::Api(api_error(rid, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_one_well_formed_session_cookie_counts() {
        let token = SessionToken::generate().unwrap();
        let headers = |values: &[&str]| {
            let mut h = http::HeaderMap::new();
            for v in values {
                h.append(header::COOKIE, HeaderValue::from_str(v).unwrap());
            }
            h
        };
        let good = format!("theme=dark; gatehouse_admin={}", token.expose());
        let found = |values: &[&str], name: &str| match session_cookie(&headers(values), name) {
            SessionCookie::Absent => "absent".to_owned(),
            SessionCookie::Unusable => "unusable".to_owned(),
            SessionCookie::Token(t) => t.digest(),
        };
        assert_eq!(found(&[&good], "gatehouse_admin"), token.digest());
        assert_eq!(found(&[&good, &good], "gatehouse_admin"), "unusable", "two cookies");
        assert_eq!(found(&["gatehouse_admin=abc"], "gatehouse_admin"), "unusable");
        assert_eq!(found(&[&good], "__Secure-gatehouse_admin"), "absent");
        assert_eq!(found(&[], "gatehouse_admin"), "absent");
        assert_eq!(found(&["theme=dark"], "gatehouse_admin"), "absent");
    }
}
