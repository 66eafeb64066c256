// Minted tokens every node shares (`credential_tokens`): read, claimed for
// a refresh by one node at a time, written by the claim's holder. Each is
// one statement, so no transaction waits on another.

/// The minted tokens of `credential_id`, if any were ever claimed.
pub(crate) async fn minted_tokens(
    pool: &Pool<Db>,
    credential_id: &str,
) -> Result<Option<MintedTokens>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT credential_id, rotation, sealed_refresh, sealed_access, access_expires_at, updated_at \
         FROM credential_tokens WHERE credential_id = $1",
    )
        .bind(credential_id)
        .fetch_optional(pool)
        .await?)
}

/// Claims the refresh of `credential_id` for `holder` until `until`, if
/// no other holder's claim is in force at `now`: the row as it stands, or
/// `None` while another node refreshes.
pub(crate) async fn claim_token_refresh(
    pool: &Pool<Db>,
    credential_id: &str,
    holder: &str,
    now: UnixTime,
    until: UnixTime,
) -> Result<Option<MintedTokens>, StoreError> {
    Ok(sqlx::query_as(
        "INSERT INTO credential_tokens (credential_id, rotation, claimed_by, claimed_until, updated_at) \
         VALUES ($1, 0, $2, $3, $4) \
         ON CONFLICT (credential_id) DO UPDATE SET claimed_by = excluded.claimed_by, \
         claimed_until = excluded.claimed_until \
         WHERE credential_tokens.claimed_until IS NULL OR credential_tokens.claimed_until <= $4 \
         OR credential_tokens.claimed_by = excluded.claimed_by \
         RETURNING credential_id, rotation, sealed_refresh, sealed_access, access_expires_at, updated_at",
    )
    .bind(credential_id)
    .bind(holder)
    .bind(until)
    .bind(now)
    .fetch_optional(pool)
    .await?)
}

/// Writes a refresh's tokens and ends `holder`'s claim, if the claim is
/// still `holder`'s and the row is still at `rotation`: whether it was.
pub(crate) async fn finish_token_refresh(
    pool: &Pool<Db>,
    holder: &str,
    tokens: &MintedTokens,
    now: UnixTime,
) -> Result<bool, StoreError> {
    let written = sqlx::query(
        "UPDATE credential_tokens SET rotation = rotation + 1, sealed_refresh = $3, sealed_access = $4, \
         access_expires_at = $5, claimed_by = NULL, claimed_until = NULL, updated_at = $6 \
         WHERE credential_id = $1 AND claimed_by = $2 AND rotation = $7",
    )
    .bind(&tokens.credential_id)
    .bind(holder)
    .bind(&tokens.sealed_refresh)
    .bind(&tokens.sealed_access)
    .bind(tokens.access_expires_at)
    .bind(now)
    .bind(tokens.rotation)
    .execute(pool)
    .await?;
    Ok(written.rows_affected() == 1)
}

/// Ends `holder`'s claim on `credential_id` without a new token.
pub(crate) async fn release_token_refresh(
    pool: &Pool<Db>,
    credential_id: &str,
    holder: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE credential_tokens SET claimed_by = NULL, claimed_until = NULL \
         WHERE credential_id = $1 AND claimed_by = $2",
    )
    .bind(credential_id)
    .bind(holder)
    .execute(pool)
    .await?;
    Ok(())
}
