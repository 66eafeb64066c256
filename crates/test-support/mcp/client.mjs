// A real MCP client, the official TypeScript SDK's, for gatehouse's tests.
//
//   node client.mjs URL PROXY [TOOL...]
//
// Connects to the MCP endpoint URL through gatehouse's forward proxy PROXY
// (http://grant:TOKEN@host:port; requests go in absolute form with the
// grant as Proxy-Authorization, as curl and pip send them), lists the
// tools, calls each TOOL named, and prints one JSON line of what the SDK
// surfaced: the tool names, each call's text or its JSON-RPC error.
import http from "node:http";
import { Readable } from "node:stream";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, proxy, ...tools] = process.argv.slice(2);
const via = new URL(proxy);
const credentials = `${decodeURIComponent(via.username)}:${decodeURIComponent(via.password)}`;
const proxyAuthorization = "Basic " + Buffer.from(credentials).toString("base64");

// The SDK's fetch, through the proxy.
function proxiedFetch(input, init = {}) {
  const target = new URL(input instanceof Request ? input.url : String(input));
  const headers = Object.fromEntries(new Headers(init.headers ?? {}).entries());
  headers["proxy-authorization"] = proxyAuthorization;
  headers.host = target.host;
  return new Promise((resolve, reject) => {
    const request = http.request(
      { host: via.hostname, port: via.port, method: init.method ?? "GET", path: target.href, headers },
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
    init.signal?.addEventListener("abort", () => request.destroy(new Error("aborted")));
    request.end(init.body === undefined || init.body === null ? undefined : init.body);
  });
}

const client = new Client({ name: "gatehouse-test-client", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: proxiedFetch });
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
