//! What a credential is: a `static` secret, or what gatehouse mints or
//! signs with at the door — a GitHub App's installation tokens
//! (`github_app`), OAuth access tokens from a refresh token
//! (`oauth2_refresh`), AWS Signature Version 4 (`aws_sigv4`).
//!
//! A kind's facts that steer its secret (where tokens are minted, the app
//! and installation, the region and service, the hosts) are written into
//! the credential's `inject` column, which its seal binds: a row edited to
//! mint elsewhere no longer opens. What is secret (the private key, the
//! refresh token and client secret, the AWS keys) is the sealed material.

use std::collections::BTreeMap;

use gatehouse_capability::credential::CredentialSecret;
use gatehouse_capability::github_app::AppKey;
use gatehouse_capability::sigv4::{AwsKeys, Scope};
use gatehouse_egress::inject::{Delivery, InjectRule};
use gatehouse_egress::target::{Scheme, parse_url};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use zeroize::Zeroizing;

/// The kinds, as the API names them.
pub const KINDS: [&str; 4] = ["static", "github_app", "oauth2_refresh", "aws_sigv4"];
/// The fields each kind takes in the API beside `name`, `purpose`, `kind`,
/// `inject` and `allow_plain_http`: one list for the route that reads them
/// and the document that describes them.
pub const KIND_FIELDS: [(&str, &[&str]); 4] = [
    ("static", &["host", "secret"]),
    (
        "github_app",
        &["hosts", "app_id", "installation_id", "private_key", "api_url", "repositories", "permissions"],
    ),
    ("oauth2_refresh", &["host", "token_url", "client_id", "client_secret", "refresh_token", "scope"]),
    ("aws_sigv4", &["hosts", "access_key_id", "secret_access_key", "session_token", "region", "service"]),
];

/// The fields `kind` takes ([`KIND_FIELDS`]), if it is a kind.
pub fn fields_of(kind: &str) -> Option<&'static [&'static str]> {
    KIND_FIELDS.iter().find(|(name, _)| *name == kind).map(|(_, fields)| *fields)
}

/// GitHub's API, where installation tokens are minted unless a credential
/// names another (GitHub Enterprise Server's `https://HOST/api/v3`).
pub const GITHUB_API_URL: &str = "https://api.github.com";
/// The user name git sends an installation token with (GitHub's docs).
pub const GIT_TOKEN_USERNAME: &str = "x-access-token";
/// The most hosts one credential serves.
pub const MAX_HOSTS: usize = 16;

/// How a credential is sent: `{"header", "format"}` or `{"basic_username"}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InjectSpec {
    /// The header it goes in.
    #[serde(default)]
    pub header: Option<String>,
    /// The header's value, `{secret}` standing for it.
    #[serde(default)]
    pub format: Option<String>,
    /// HTTP Basic with this user name and the secret as password.
    #[serde(default)]
    pub basic_username: Option<String>,
}

pub(crate) const INJECT_SHAPE: &str = "inject is {\"header\", \"format\"} or {\"basic_username\"}";

impl InjectSpec {
    /// The rule the spec gives, checked; the reason for the caller otherwise.
    pub fn rule(&self) -> Result<InjectRule, &'static str> {
        match (&self.header, &self.format, &self.basic_username) {
            (Some(header), Some(format), None) => InjectRule::header(header, format),
            (None, None, Some(username)) => InjectRule::basic(username),
            _ => Err(INJECT_SHAPE),
        }
    }

    /// Its stored form: the fields given, nothing else.
    pub fn stored(&self) -> Value {
        match (&self.header, &self.format, &self.basic_username) {
            (Some(header), Some(format), _) => json!({"header": header, "format": format}),
            (_, _, Some(username)) => json!({"basic_username": username}),
            _ => json!({}),
        }
    }
}

/// A GitHub App installation, and what its tokens may be narrowed to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GithubApp {
    /// The app's id (the JWT's `iss`).
    pub app_id: u64,
    /// The installation tokens are minted for.
    pub installation_id: u64,
    /// The API's base URL, canonical, without a trailing `/`.
    pub api_url: String,
    /// Repository names the tokens are narrowed to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repositories: Option<Vec<String>>,
    /// Permissions the tokens are narrowed to (`contents: read`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<BTreeMap<String, String>>,
}

impl GithubApp {
    /// Where an installation token is minted (GitHub's REST API, "Create
    /// an installation access token for an app").
    pub fn mint_url(&self) -> String {
        format!("{}/app/installations/{}/access_tokens", self.api_url, self.installation_id)
    }

    /// Where the token in hand is revoked ("Revoke an installation access token").
    pub fn revoke_url(&self) -> String {
        format!("{}/installation/token", self.api_url)
    }

    /// The body of a mint: the narrowing asked for, `{}` when none.
    pub fn mint_body(&self) -> Value {
        let mut body = Map::new();
        if let Some(repositories) = &self.repositories {
            body.insert("repositories".into(), json!(repositories));
        }
        if let Some(permissions) = &self.permissions {
            body.insert("permissions".into(), json!(permissions));
        }
        Value::Object(body)
    }

    /// The API's host, which gets the credential's inject rule (other
    /// hosts, git's, get Basic `x-access-token`).
    fn api_host(&self) -> Option<String> {
        parse_url(&self.api_url).ok().map(|t| t.host.to_string())
    }
}

/// An OAuth 2.0 client refreshing its access token (RFC 6749 §6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuth2Refresh {
    /// The token endpoint, canonical.
    pub token_url: String,
    /// The client's id.
    pub client_id: String,
    /// The scope asked for, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// A credential's kind and its facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A secret sent as it is.
    Static,
    /// Installation tokens minted from an app's key.
    GithubApp(GithubApp),
    /// Access tokens minted from a refresh token.
    OAuth2Refresh(OAuth2Refresh),
    /// Requests signed with AWS keys.
    AwsSigV4(Scope),
}

impl Kind {
    /// Its name in the API.
    pub fn name(&self) -> &'static str {
        match self {
            Kind::Static => "static",
            Kind::GithubApp(_) => "github_app",
            Kind::OAuth2Refresh(_) => "oauth2_refresh",
            Kind::AwsSigV4(_) => "aws_sigv4",
        }
    }

    /// Its secret is a token gatehouse mints.
    pub fn is_minted(&self) -> bool {
        matches!(self, Kind::GithubApp(_) | Kind::OAuth2Refresh(_))
    }
}

/// What a credential's `inject` column says: its kind, how its secret goes
/// in, whether plain HTTP is allowed.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The kind.
    pub kind: Kind,
    /// The inject rule given (a static credential always has one; a minted
    /// kind without one sends `Authorization: Bearer {secret}`; `aws_sigv4`
    /// none).
    pub inject: Option<InjectSpec>,
    /// The secret may go over plain `http://`.
    pub allow_plain_http: bool,
}

fn field<T: serde::de::DeserializeOwned>(fields: &mut Map<String, Value>, name: &str) -> Option<T> {
    serde_json::from_value(fields.remove(name)?).ok()
}

impl Stored {
    /// The column read back; `None` when it does not read (a lease on it
    /// is then unusable, never guessed).
    pub fn read(text: &str) -> Option<Self> {
        let mut fields: Map<String, Value> = serde_json::from_str(text).ok()?;
        let allow_plain_http = match fields.remove("allow_plain_http") {
            None => false,
            Some(Value::Bool(allowed)) => allowed,
            Some(_) => return None,
        };
        let kind = match fields.remove("kind") {
            None => Kind::Static,
            Some(Value::String(kind)) => match kind.as_str() {
                "github_app" => {
                    let mut app = Map::new();
                    for name in ["app_id", "installation_id", "api_url", "repositories", "permissions"] {
                        if let Some(v) = fields.remove(name) {
                            app.insert(name.into(), v);
                        }
                    }
                    Kind::GithubApp(serde_json::from_value(Value::Object(app)).ok()?)
                }
                "oauth2_refresh" => {
                    let mut oauth = Map::new();
                    for name in ["token_url", "client_id", "scope"] {
                        if let Some(v) = fields.remove(name) {
                            oauth.insert(name.into(), v);
                        }
                    }
                    Kind::OAuth2Refresh(serde_json::from_value(Value::Object(oauth)).ok()?)
                }
                "aws_sigv4" => {
                    let region: String = field(&mut fields, "region")?;
                    let service: String = field(&mut fields, "service")?;
                    Kind::AwsSigV4(Scope::new(&region, &service).ok()?)
                }
                _ => return None,
            },
            Some(_) => return None,
        };
        let inject = match fields.is_empty() {
            true => None,
            false => Some(serde_json::from_value::<InjectSpec>(Value::Object(fields)).ok()?),
        };
        // Every rule read back is one the API would accept.
        if let Some(spec) = &inject {
            spec.rule().ok()?;
        }
        match (&kind, &inject) {
            (Kind::AwsSigV4(_), Some(_)) => None,
            _ => Some(Self { kind, inject, allow_plain_http }),
        }
    }

    /// The column's text: the inject rule's fields, then the kind's.
    pub fn text(&self) -> String {
        let mut fields = match &self.inject {
            Some(spec) => match spec.stored() {
                Value::Object(map) => map,
                _ => Map::new(),
            },
            None => Map::new(),
        };
        match &self.kind {
            Kind::Static => {}
            Kind::GithubApp(app) => {
                fields.insert("kind".into(), "github_app".into());
                if let Ok(Value::Object(app)) = serde_json::to_value(app) {
                    fields.extend(app);
                }
            }
            Kind::OAuth2Refresh(oauth) => {
                fields.insert("kind".into(), "oauth2_refresh".into());
                if let Ok(Value::Object(oauth)) = serde_json::to_value(oauth) {
                    fields.extend(oauth);
                }
            }
            Kind::AwsSigV4(scope) => {
                fields.insert("kind".into(), "aws_sigv4".into());
                fields.insert("region".into(), scope.region.clone().into());
                fields.insert("service".into(), scope.service.clone().into());
            }
        }
        if self.allow_plain_http {
            fields.insert("allow_plain_http".into(), Value::Bool(true));
        }
        Value::Object(fields).to_string()
    }

    /// How the credential goes into a request to `host` (one of its hosts).
    pub fn delivery_for(&self, host: &str) -> Option<Delivery> {
        let given = || self.inject.as_ref().and_then(|spec| spec.rule().ok());
        let bearer = || InjectRule::header("authorization", "Bearer {secret}").ok();
        let rule = match &self.kind {
            Kind::Static => given()?,
            Kind::OAuth2Refresh(_) => given().or_else(bearer)?,
            Kind::GithubApp(app) if app.api_host().as_deref() == Some(host) => given().or_else(bearer)?,
            Kind::GithubApp(_) => InjectRule::basic(GIT_TOKEN_USERNAME).ok()?,
            Kind::AwsSigV4(scope) => return Some(Delivery::SigV4(scope.clone())),
        };
        Some(Delivery::Inject(rule))
    }

    /// What the API shows of the kind's facts (never a secret).
    pub fn shown(&self) -> Value {
        match &self.kind {
            Kind::Static => Value::Null,
            Kind::GithubApp(app) => serde_json::to_value(app).unwrap_or_default(),
            Kind::OAuth2Refresh(oauth) => serde_json::to_value(oauth).unwrap_or_default(),
            Kind::AwsSigV4(scope) => json!({"region": scope.region, "service": scope.service}),
        }
    }
}

/// An OAuth client's secrets, sealed as one JSON material.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthSecrets {
    /// The refresh token the credential was created with.
    pub refresh_token: Zeroizing<String>,
    /// The client's secret, for a confidential client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<Zeroizing<String>>,
}

impl OAuthSecrets {
    /// As one secret to seal.
    pub fn to_material(&self) -> Option<CredentialSecret> {
        let text = Zeroizing::new(serde_json::to_string(self).ok()?);
        CredentialSecret::new(&text).ok()
    }

    /// Out of an opened secret.
    pub fn from_material(material: &CredentialSecret) -> Option<Self> {
        let secrets: Self = serde_json::from_slice(material.expose()).ok()?;
        (oauth_text(&secrets.refresh_token, 4096)
            && secrets.client_secret.as_deref().is_none_or(|s| oauth_text(s, 4096)))
        .then_some(secrets)
    }
}

/// RFC 6749's VSCHAR (`%x20-7E`), 1 to `max` bytes: what client ids,
/// secrets and tokens are made of.
pub fn oauth_text(text: &str, max: usize) -> bool {
    !text.is_empty() && text.len() <= max && text.bytes().all(|b| (0x20..=0x7e).contains(&b))
}

/// A URL a kind mints at, checked: `https://` (plain `http://` only where
/// the credential allows it), no user information; its canonical form
/// without a trailing `/` and without a query or fragment for an API base.
pub fn mint_url(raw: &str, allow_plain_http: bool, what: &'static str) -> Result<String, &'static str> {
    let target = parse_url(raw).map_err(|_| what)?;
    if target.scheme != Scheme::Https && !allow_plain_http {
        return Err(what);
    }
    if raw.contains('@') || raw.contains('#') {
        return Err(what);
    }
    Ok(target.url().trim_end_matches('/').to_owned())
}

/// A GitHub App installation as a caller gives it, checked: ids from 1,
/// the API's base URL ([`GITHUB_API_URL`] when none), repository names
/// (1-500 of `[A-Za-z0-9._-]`, 1-100 long) and permissions (1-100 names
/// of `[a-z_]`, each `read`, `write` or `admin`) to narrow its tokens to.
pub fn github_app(
    app_id: u64,
    installation_id: u64,
    api_url: Option<&str>,
    repositories: Option<Vec<String>>,
    permissions: Option<BTreeMap<String, String>>,
    allow_plain_http: bool,
) -> Result<GithubApp, &'static str> {
    if app_id == 0 || installation_id == 0 {
        return Err("app_id and installation_id are GitHub's ids, from 1");
    }
    let api_url = mint_url(
        api_url.unwrap_or(GITHUB_API_URL),
        allow_plain_http,
        "api_url is the API's https:// base URL, without user, query or fragment",
    )?;
    if api_url.contains('?') {
        return Err("api_url is the API's https:// base URL, without user, query or fragment");
    }
    let repository = |r: &String| {
        (1..=100).contains(&r.len()) && r.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    };
    if repositories.as_ref().is_some_and(|r| r.is_empty() || r.len() > 500 || !r.iter().all(repository)) {
        return Err("repositories holds 1-500 repository names of A-Z a-z 0-9 . _ -");
    }
    let permission = |(name, level): (&String, &String)| {
        (1..=64).contains(&name.len())
            && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
            && ["read", "write", "admin"].contains(&level.as_str())
    };
    if permissions.as_ref().is_some_and(|p| p.is_empty() || p.len() > 100 || !p.iter().all(permission)) {
        return Err("permissions maps 1-100 permission names (a-z, _) to read, write or admin");
    }
    Ok(GithubApp { app_id, installation_id, api_url, repositories, permissions })
}

/// An OAuth client as a caller gives it, checked: the token endpoint over
/// TLS, a client id and scope of RFC 6749's characters.
pub fn oauth2_refresh(
    token_url: &str,
    client_id: String,
    scope: Option<String>,
    allow_plain_http: bool,
) -> Result<OAuth2Refresh, &'static str> {
    let token_url = mint_url(
        token_url,
        allow_plain_http,
        "token_url is the token endpoint's https:// URL, without user or fragment",
    )?;
    if !oauth_text(&client_id, 256) {
        return Err("client_id is 1-256 visible ASCII characters");
    }
    // RFC 6749 §3.3: scope tokens of %x21 / %x23-5B / %x5D-7E, one space apart.
    let scope_ok = |s: &String| {
        s.len() <= 1024
            && s.split(' ').all(|t| {
                !t.is_empty()
                    && t.bytes()
                        .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b))
            })
    };
    if scope.as_ref().is_some_and(|s| !scope_ok(s)) {
        return Err("scope is space-separated scope tokens (RFC 6749 §3.3), at most 1024 characters");
    }
    Ok(OAuth2Refresh { token_url, client_id, scope })
}

/// The sealed material of a kind, from what the caller gave; the message
/// is the caller's.
pub enum Material {
    /// The secret as given.
    Static(Zeroizing<String>),
    /// The app's PEM key.
    GithubApp(Zeroizing<String>),
    /// The refresh token and client secret.
    OAuth2Refresh(OAuthSecrets),
    /// The AWS keys.
    AwsSigV4 {
        /// The access key id.
        access_key_id: String,
        /// The secret access key.
        secret_access_key: Zeroizing<String>,
        /// The session token.
        session_token: Option<Zeroizing<String>>,
    },
}

impl Material {
    /// The one secret to seal, checked.
    pub fn sealable(&self) -> Result<CredentialSecret, &'static str> {
        match self {
            Material::Static(secret) => CredentialSecret::new(secret)
                .map_err(|_| "secret must be 1-4096 bytes without control characters"),
            Material::GithubApp(pem) => {
                let key = AppKey::from_pem(pem).map_err(|e| match e {
                    gatehouse_capability::github_app::AppKeyError::NotPem => {
                        "private_key is the app's PEM private key (BEGIN RSA PRIVATE KEY or BEGIN PRIVATE KEY)"
                    }
                    gatehouse_capability::github_app::AppKeyError::Rejected => {
                        "private_key is not an RSA private key of 2048 to 8192 bits"
                    }
                })?;
                key.to_material().map_err(|_| "private_key is too large to keep")
            }
            Material::OAuth2Refresh(secrets) => {
                if !oauth_text(&secrets.refresh_token, 4096) {
                    return Err("refresh_token is 1-4096 visible ASCII characters");
                }
                if secrets.client_secret.as_deref().is_some_and(|s| !oauth_text(s, 1024)) {
                    return Err("client_secret is 1-1024 visible ASCII characters");
                }
                secrets.to_material().ok_or("refresh_token and client_secret are too large to keep")
            }
            Material::AwsSigV4 { access_key_id, secret_access_key, session_token } => {
                let keys = AwsKeys::new(
                    access_key_id,
                    secret_access_key,
                    session_token.as_deref().map(String::as_str),
                )
                .map_err(|e| match e {
                    gatehouse_capability::sigv4::AwsKeysError::AccessKeyId => {
                        "access_key_id is 16-128 characters of A-Z and 0-9"
                    }
                    gatehouse_capability::sigv4::AwsKeysError::SecretAccessKey => {
                        "secret_access_key is 1-256 visible ASCII characters"
                    }
                    gatehouse_capability::sigv4::AwsKeysError::SessionToken => {
                        "session_token is 1-2048 visible ASCII characters"
                    }
                })?;
                keys.to_material().map_err(|_| "the AWS keys are too large to keep")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(header: &str, format: &str) -> InjectSpec {
        InjectSpec { header: Some(header.into()), format: Some(format.into()), basic_username: None }
    }

    #[test]
    fn a_static_column_reads_as_it_always_did() {
        // Rows sealed before kinds existed bind this exact text.
        let text = r#"{"format":"Bearer {secret}","header":"authorization"}"#;
        let stored = Stored::read(text).unwrap();
        assert_eq!(stored.kind, Kind::Static);
        assert_eq!(Stored::read(&stored.text()).unwrap().kind, Kind::Static);
        let plain = r#"{"basic_username":"git","allow_plain_http":true}"#;
        let stored = Stored::read(plain).unwrap();
        assert!(stored.allow_plain_http);
        assert!(Stored::read(&stored.text()).unwrap().allow_plain_http);
    }

    #[test]
    fn each_kind_round_trips_and_delivers_per_host() {
        let app = GithubApp {
            app_id: 1,
            installation_id: 2,
            api_url: "https://api.github.com".into(),
            repositories: Some(vec!["r".into()]),
            permissions: Some(BTreeMap::from([("contents".into(), "write".into())])),
        };
        let stored = Stored { kind: Kind::GithubApp(app.clone()), inject: None, allow_plain_http: false };
        let back = Stored::read(&stored.text()).unwrap();
        assert_eq!(back.kind, stored.kind);
        assert_eq!(
            back.delivery_for("api.github.com"),
            Some(Delivery::Inject(InjectRule::header("authorization", "Bearer {secret}").unwrap()))
        );
        assert_eq!(
            back.delivery_for("github.com"),
            Some(Delivery::Inject(InjectRule::basic("x-access-token").unwrap()))
        );
        assert_eq!(app.mint_url(), "https://api.github.com/app/installations/2/access_tokens");
        assert_eq!(app.mint_body(), json!({"repositories": ["r"], "permissions": {"contents": "write"}}));

        let oauth = OAuth2Refresh {
            token_url: "https://id.example/token".into(),
            client_id: "c".into(),
            scope: None,
        };
        let stored = Stored {
            kind: Kind::OAuth2Refresh(oauth),
            inject: Some(spec("x-api-key", "{secret}")),
            allow_plain_http: false,
        };
        let back = Stored::read(&stored.text()).unwrap();
        assert_eq!(back.kind, stored.kind);
        assert_eq!(
            back.delivery_for("any"),
            Some(Delivery::Inject(InjectRule::header("x-api-key", "{secret}").unwrap()))
        );

        let scope = Scope::new("eu-west-1", "s3").unwrap();
        let stored = Stored { kind: Kind::AwsSigV4(scope.clone()), inject: None, allow_plain_http: false };
        assert_eq!(Stored::read(&stored.text()).unwrap().delivery_for("h"), Some(Delivery::SigV4(scope)));
    }

    #[test]
    fn a_column_that_does_not_read_is_never_guessed() {
        for text in [
            r#"{"kind":"nonesuch"}"#,
            r#"{"kind":"aws_sigv4","region":"us-east-1"}"#,
            r#"{"kind":"aws_sigv4","region":"us-east-1","service":"s3","header":"a","format":"{secret}"}"#,
            r#"{"kind":"github_app","app_id":"one","installation_id":2,"api_url":"https://a"}"#,
            r#"{"header":"host","format":"{secret}"}"#,
            r#"{"allow_plain_http":"yes","basic_username":"u"}"#,
        ] {
            assert!(Stored::read(text).is_none(), "{text}");
        }
    }

    #[test]
    fn mint_urls_are_https_canonical_and_carry_no_user() {
        assert_eq!(mint_url("https://API.github.com/", false, "x"), Ok("https://api.github.com".into()));
        assert_eq!(
            mint_url("https://ghe.example/api/v3", false, "x"),
            Ok("https://ghe.example/api/v3".into())
        );
        assert_eq!(mint_url("http://id.example/token", false, "x"), Err("x"));
        assert_eq!(mint_url("http://id.example/token", true, "x"), Ok("http://id.example/token".into()));
        assert_eq!(mint_url("https://u:p@id.example/token", false, "x"), Err("x"));
    }
}
