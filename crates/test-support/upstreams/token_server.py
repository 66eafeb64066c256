#!/usr/bin/env python3
"""Token endpoints for gatehouse's tests, over TLS on loopback.

GitHub (as its REST docs describe it): POST /app/installations/{id}/access_tokens
takes an RS256 app JWT, verified with the app's public key (alg, iss, iat/exp
rules), and answers an installation token with its expires_at; DELETE
/installation/token revokes the token presented; GET /installation/repositories
answers only with a live token. A second address serves git over HTTPS
(`git http-backend`) to Basic `x-access-token:<installation token>`.

OAuth 2.0 (RFC 6749 §6): POST /oauth/token takes the refresh grant, rotates
the refresh token on every use and refuses a used one (invalid_grant), as
refresh-token rotation prescribes; GET /oauth/resource answers only with a
live access token, and /echo returns the Authorization header it got.

POST /control {"mode": ...} makes the mints misbehave: garbage, no_expiry,
expired, slow, refuse. GET /stats tells what happened. State is shared by
both addresses. Arguments: a JSON object on argv[1].
"""

import base64
import json
import os
import secrets
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding

CONFIG = json.loads(sys.argv[1])
LOCK = threading.Lock()
STATE = {
    "mode": "normal",
    "mints": 0,
    "jwt_refused": 0,
    "revoked": 0,
    "mint_bodies": [],
    "refreshes": 0,
    "reused": 0,
    "git": 0,
    "git_refused": 0,
    "resource_ok": 0,
    "resource_refused": 0,
}
TOKENS = {}  # installation or access token -> expiry (unix seconds)
REFRESH = {"current": CONFIG.get("refresh_token"), "used": set()}
PUBLIC_KEY = (
    serialization.load_pem_public_key(CONFIG["app_public_key"].encode()) if CONFIG.get("app_public_key") else None
)


def b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def rfc3339(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def verify_app_jwt(authorization):
    """The JWT's verdict under GitHub's rules: None when it is good."""
    if not authorization or not authorization.startswith("Bearer "):
        return "no bearer JWT"
    parts = authorization[len("Bearer "):].split(".")
    if len(parts) != 3:
        return "not a JWT"
    header = json.loads(b64url_decode(parts[0]))
    if header.get("alg") != "RS256":
        return "alg is not RS256"
    try:
        PUBLIC_KEY.verify(
            b64url_decode(parts[2]), f"{parts[0]}.{parts[1]}".encode(), padding.PKCS1v15(), hashes.SHA256()
        )
    except Exception:
        return "signature does not verify"
    claims = json.loads(b64url_decode(parts[1]))
    now = int(time.time())
    if str(claims.get("iss")) != str(CONFIG["app_id"]):
        return "iss is not the app"
    iat, exp = claims.get("iat"), claims.get("exp")
    if not isinstance(iat, int) or not isinstance(exp, int):
        return "iat and exp are integers"
    if iat > now + 60:
        return "'Issued at' claim ('iat') must be an Integer representing a time in the past"
    if exp <= now:
        return "'Expiration time' claim ('exp') is in the past"
    if exp - iat > 600 or exp > now + 600 + 60:
        return "'Expiration time' claim ('exp') is too far in the future"
    return None


def live(token):
    with LOCK:
        expiry = TOKENS.get(token)
    return expiry is not None and expiry > time.time()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def answer(self, status, body=b"", content_type="application/json", headers=()):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def bearer(self):
        value = self.headers.get("Authorization", "")
        return value[len("Bearer "):] if value.startswith("Bearer ") else None

    def do_GET(self):
        self.route("GET")

    def do_POST(self):
        self.route("POST")

    def do_DELETE(self):
        self.route("DELETE")

    def route(self, method):
        path = urllib.parse.urlsplit(self.path).path
        if path == "/stats":
            with LOCK:
                stats = dict(STATE, live_tokens=len([t for t, e in TOKENS.items() if e > time.time()]))
            return self.answer(200, stats)
        if path == "/control" and method == "POST":
            with LOCK:
                STATE["mode"] = json.loads(self.body())["mode"]
            return self.answer(200, {"ok": True})
        if path == "/echo":
            return self.answer(200, {"authorization": self.headers.get("Authorization")})
        if method == "POST" and path == f"/app/installations/{CONFIG.get('installation_id')}/access_tokens":
            return self.mint()
        if method == "DELETE" and path == "/installation/token":
            token = self.bearer()
            with LOCK:
                if token in TOKENS:
                    del TOKENS[token]
                    STATE["revoked"] += 1
                    return self.answer(204, b"")
            return self.answer(401, {"message": "Bad credentials"})
        if path == "/installation/repositories":
            if live(self.bearer()):
                return self.answer(200, {"total_count": 1, "repositories": [{"name": "repo"}]})
            return self.answer(401, {"message": "Bad credentials"})
        if method == "POST" and path == "/oauth/token":
            return self.refresh()
        if path == "/oauth/resource":
            ok = live(self.bearer())
            with LOCK:
                STATE["resource_ok" if ok else "resource_refused"] += 1
            return self.answer(200 if ok else 401, {"ok": ok})
        if ".git/" in path or path.endswith(".git"):
            return self.git(method, path)
        return self.answer(404, {"message": "Not Found"})

    def misbehave(self):
        """The mode's answer to a mint, or None to answer properly."""
        mode = STATE["mode"]
        if mode == "garbage":
            return self.answer(201, b"<html>not json", "text/html") or True
        if mode == "refuse":
            return self.answer(401, {"message": "A JSON web token could not be decoded"}) or True
        if mode == "slow":
            time.sleep(30)
        return None

    def mint(self):
        refused = verify_app_jwt(self.headers.get("Authorization"))
        body = self.body()
        if refused:
            with LOCK:
                STATE["jwt_refused"] += 1
            return self.answer(401, {"message": refused})
        if self.misbehave():
            return None
        token = "ghs_" + secrets.token_hex(18)
        expiry = int(time.time()) + 3600
        with LOCK:
            STATE["mints"] += 1
            STATE["mint_bodies"].append(json.loads(body or b"{}"))
            TOKENS[token] = expiry
            mode = STATE["mode"]
        answer = {"token": token, "expires_at": rfc3339(expiry), "permissions": {"contents": "write"}}
        if mode == "no_expiry":
            del answer["expires_at"]
        if mode == "expired":
            answer["expires_at"] = rfc3339(int(time.time()) - 10)
        return self.answer(201, answer)

    def refresh(self):
        form = urllib.parse.parse_qs(self.body().decode())
        field = lambda name: (form.get(name) or [None])[0]
        client_id, client_secret = field("client_id"), None
        authorization = self.headers.get("Authorization", "")
        if authorization.startswith("Basic "):
            user, _, password = base64.b64decode(authorization[6:]).decode().partition(":")
            client_id, client_secret = urllib.parse.unquote_plus(user), urllib.parse.unquote_plus(password)
        if client_id != CONFIG["client_id"] or client_secret != CONFIG.get("client_secret"):
            return self.answer(401, {"error": "invalid_client"})
        if field("grant_type") != "refresh_token":
            return self.answer(400, {"error": "unsupported_grant_type"})
        if self.misbehave():
            return None
        presented = field("refresh_token")
        with LOCK:
            if presented in REFRESH["used"]:
                # A used refresh token: refused, and (RFC 9700 §4.14.2) the
                # whole grant with it.
                STATE["reused"] += 1
                REFRESH["current"] = None
                return self.answer(400, {"error": "invalid_grant", "error_description": "refresh token reused"})
            if presented != REFRESH["current"]:
                return self.answer(400, {"error": "invalid_grant"})
            REFRESH["used"].add(presented)
            REFRESH["current"] = "rt_" + secrets.token_hex(16)
            STATE["refreshes"] += 1
            access = "at_" + secrets.token_hex(16)
            lifetime = CONFIG.get("expires_in", 3600)
            TOKENS[access] = int(time.time()) + max(lifetime, 0) + 3600
            answer = {"access_token": access, "token_type": "Bearer", "expires_in": lifetime,
                      "refresh_token": REFRESH["current"]}
            mode = STATE["mode"]
        if mode == "no_expiry":
            del answer["expires_in"]
        if mode == "expired":
            answer["expires_in"] = 0
        return self.answer(200, answer)

    def git(self, method, path):
        authorization = self.headers.get("Authorization", "")
        token = None
        if authorization.startswith("Basic "):
            user, _, password = base64.b64decode(authorization[6:]).decode().partition(":")
            token = password if user == "x-access-token" else None
        if not live(token):
            with LOCK:
                STATE["git_refused"] += 1
            return self.answer(401, b"", "text/plain", [("WWW-Authenticate", 'Basic realm="GitHub"')])
        with LOCK:
            STATE["git"] += 1
        query = urllib.parse.urlsplit(self.path).query
        env = dict(os.environ, GIT_PROJECT_ROOT=CONFIG["git_root"], GIT_HTTP_EXPORT_ALL="1",
                   REQUEST_METHOD=method, PATH_INFO=path, QUERY_STRING=query,
                   CONTENT_TYPE=self.headers.get("Content-Type", ""), REMOTE_USER="x-access-token",
                   REMOTE_ADDR="127.0.0.1")
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        body = self.body() if method == "POST" else b""
        env["CONTENT_LENGTH"] = str(len(body))
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.decode().split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name, value.strip()))
        content_type = dict((n.lower(), v) for n, v in headers).get("content-type", "application/octet-stream")
        rest = [(n, v) for n, v in headers if n.lower() not in ("content-type", "content-length")]
        return self.answer(status, payload, content_type, rest)


def serve(address):
    server = ThreadingHTTPServer((address, 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(CONFIG["cert"], CONFIG["key"])
    server.socket = context.wrap_socket(server.socket, server_side=True)
    return server


servers = [serve(address) for address in CONFIG["addresses"]]
print(json.dumps([s.server_address[1] for s in servers]), flush=True)
for s in servers[1:]:
    threading.Thread(target=s.serve_forever, daemon=True).start()
servers[0].serve_forever()
