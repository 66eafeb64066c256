// A real MCP client, the official TypeScript SDK's, for gatehouse's tests.
//
//   node client.mjs URL PROXY [TOOL...]
//   node client.mjs URL fetch-api:API_BASE#SERVICE_TOKEN#GRANT [TOOL...]
//
// Connects to the MCP endpoint URL through gatehouse: its forward proxy
// PROXY (http://grant:TOKEN@host:port; requests go in absolute form with
// the grant as Proxy-Authorization, as curl and pip send them), or its
// fetch API (each request sent as the platform sends one on a run's
// behalf, to /v1/egress/fetch/raw). Lists the tools, calls each TOOL named,
// and prints one JSON line of what the SDK surfaced: the tool names, each
// call's text or its JSON-RPC error.
import http from "node:http";
import https from "node:https";
import { isIP } from "node:net";
import tls from "node:tls";
import { Readable } from "node:stream";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, door, ...tools] = process.argv.slice(2);

// One HTTP request, its answer as a fetch Response streaming its body.
function send(options, body, signal, scheme = http) {
  return new Promise((resolve, reject) => {
    const request = scheme.request(
      options,
      (response) => {
        const answered = new Headers();
        for (const [name, value] of Object.entries(response.headers)) {
          answered.set(name, Array.isArray(value) ? value.join(", ") : value);
        }
        const empty = [101, 204, 205, 304].includes(response.statusCode);
        resolve(new Response(empty ? null : Readable.toWeb(response), { status: response.statusCode, headers: answered }));
      },
    );
    request.on("error", reject);
    signal?.addEventListener("abort", () => request.destroy(new Error("aborted")));
    request.end(body === undefined || body === null ? undefined : body);
  });
}

// A CONNECT tunnel through the proxy to `target`'s host and port.
function tunnel(via, proxyAuthorization, target) {
  const authority = `${target.hostname}:${target.port || 443}`;
  return new Promise((resolve, reject) => {
    const request = http.request({
      host: via.hostname,
      port: via.port,
      method: "CONNECT",
      path: authority,
      headers: { host: authority, "proxy-authorization": proxyAuthorization },
    });
    request.on("connect", (response, socket) =>
      response.statusCode === 200 ? resolve(socket) : reject(new Error(`CONNECT answered ${response.statusCode}`)),
    );
    request.on("error", reject);
    request.end();
  });
}

// The SDK's fetch, through the proxy: absolute form for http, a CONNECT
// tunnel (which gatehouse terminates, for a declared server) for https,
// the interception CA trusted through NODE_EXTRA_CA_CERTS.
async function proxiedFetch(input, init = {}) {
  const via = new URL(door);
  const credentials = `${decodeURIComponent(via.username)}:${decodeURIComponent(via.password)}`;
  const proxyAuthorization = "Basic " + Buffer.from(credentials).toString("base64");
  const target = new URL(input instanceof Request ? input.url : String(input));
  const headers = Object.fromEntries(new Headers(init.headers ?? {}).entries());
  headers.host = target.host;
  const method = init.method ?? "GET";
  if (target.protocol === "https:") {
    const socket = await tunnel(via, proxyAuthorization, target);
    const servername = isIP(target.hostname) ? undefined : target.hostname;
    const createConnection = () => tls.connect({ socket, servername, host: target.hostname });
    const options = { method, path: target.pathname + target.search, headers, createConnection };
    return send(options, init.body, init.signal, https);
  }
  headers["proxy-authorization"] = proxyAuthorization;
  const options = { host: via.hostname, port: via.port, method, path: target.href, headers };
  return send(options, init.body, init.signal);
}

// The SDK's fetch, through the fetch API: the platform's request on the
// run's behalf, the run's headers forwarded one by one.
function fetchApiFetch(input, init = {}) {
  const [base, token, grant] = door.slice("fetch-api:".length).split("#");
  const api = new URL(base);
  const target = input instanceof Request ? input.url : String(input);
  const method = init.method ?? "GET";
  const query = new URLSearchParams({ url: target, purpose: "runtime", method });
  const forwarded = [...new Headers(init.headers ?? {}).entries()].map(([name, value]) => `${name}: ${value}`);
  const headers = { authorization: `Bearer ${token}`, "x-gatehouse-grant": grant, "x-gatehouse-header": forwarded };
  const options = { host: api.hostname, port: api.port, method: "POST", path: `/v1/egress/fetch/raw?${query}`, headers };
  return send(options, init.body, init.signal);
}

const client = new Client({ name: "gatehouse-test-client", version: "1.0.0" });
const fetch = door.startsWith("fetch-api:") ? fetchApiFetch : proxiedFetch;
const transport = new StreamableHTTPClientTransport(new URL(url), { fetch });
await client.connect(transport);
const seen = { tools: (await client.listTools()).tools.map((t) => t.name), calls: [] };
for (const name of tools) {
  try {
    const result = await client.callTool({ name, arguments: { text: "hi", kib: 64 } });
    const text = result.content?.[0]?.text ?? "";
    seen.calls.push({ name, text: text.slice(0, 400), length: text.length, isError: result.isError ?? false });
  } catch (e) {
    seen.calls.push({ name, code: e.code, data: e.data ?? null, message: e.message });
  }
}
// A session the server opened is ended (DELETE) before the client goes.
seen.session = transport.sessionId ?? null;
if (transport.sessionId) await transport.terminateSession();
await client.close();
console.log(JSON.stringify(seen));
