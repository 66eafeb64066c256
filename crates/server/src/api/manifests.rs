//! `/v1/manifests`: signing execution manifests and checking them.

use axum::Json;
use axum::extract::{Extension, State};
use gatehouse_plane::manifests::Checked;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::RouteTable;
use crate::http::{Answer as _, ApiError, Caller, RequestId, StrictJson};
use crate::state::AppState;

pub(super) fn routes(table: RouteTable) -> RouteTable {
    use axum::routing::post;
    table.route("/manifests/sign", post(sign_manifest)).route("/manifests/verify", post(verify_manifest))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignRequest {
    claims: Map<String, Value>,
    body: Value,
    #[serde(default)]
    ttl_seconds: Option<i64>,
}

async fn sign_manifest(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    StrictJson(req): StrictJson<SignRequest>,
) -> Result<Json<Value>, ApiError> {
    let (token, claims) =
        state.plane.sign_manifest(&rid.0, &caller, req.claims, &req.body, req.ttl_seconds).answer(&rid)?;
    Ok(Json(
        json!({"token": token, "kid": claims.kid, "exp": claims.exp, "execute_body_sha256": claims.execute_body_sha256}),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VerifyRequest {
    #[serde(default)]
    token: Option<String>,
    body: Value,
}

async fn verify_manifest(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    StrictJson(req): StrictJson<VerifyRequest>,
) -> Result<Json<Value>, ApiError> {
    let checked =
        state.plane.check_manifest(&rid.0, &caller, req.token.as_deref(), &req.body).answer(&rid)?;
    Ok(Json(match checked {
        Checked::Signed(m) => json!({"valid": true, "alg": m.alg, "claims": m.claims}),
        Checked::Unsigned => {
            state.metrics.record_unsigned();
            json!({"valid": true, "unsigned": true})
        }
        Checked::Refused(reason) => json!({"valid": false, "reason": reason}),
    }))
}
