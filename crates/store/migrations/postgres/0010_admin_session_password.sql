-- Each settings page session is bound to the password hash in force when it
-- began: password_binding is a keyed digest of that hash (HMAC-SHA256 under
-- the session's own token, which the table never holds), compared on every
-- request with the hash the node holds now. A session of another hash has
-- ended (and is deleted when next presented). Sessions from before this
-- column have no binding and end at their next request.
ALTER TABLE admin_sessions ADD COLUMN password_binding TEXT NOT NULL DEFAULT '';
