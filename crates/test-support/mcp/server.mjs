// A real MCP server, the official TypeScript SDK's, for gatehouse's tests:
// Streamable HTTP on a loopback port (printed as "listening on PORT"), at
// /mcp, stateless (a server and transport per request). With --json it
// answers POSTs with JSON; without, with SSE streams.
//
// Tools: echo (its text back, with the Authorization header the server
// received and its SHA-256, so a test sees the leased credential arrive), big (a result of
// the asked size), slow (a log notification at once, its result 1.5 s
// later: an SSE answer in two events), rm (a tool a run should never be
// let call).
import { createHash, randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { z } from "zod";

const json = process.argv.includes("--json");

function server() {
  const mcp = new McpServer({ name: "gatehouse-test", version: "1.0.0" }, { capabilities: { logging: {} } });
  mcp.tool("echo", "Echoes its text and the Authorization header it was sent", { text: z.string() }, async ({ text }, extra) => {
    const authorization = extra.requestInfo?.headers?.authorization ?? null;
    // The header's digest too: an answer echoing a credential is scrubbed
    // on its way back, its digest shows what arrived.
    const authorization_sha256 = authorization && createHash("sha256").update(authorization).digest("hex");
    return { content: [{ type: "text", text: JSON.stringify({ text, authorization, authorization_sha256 }) }] };
  });
  mcp.tool("big", "A large result", { kib: z.number().int().min(1).max(4096) }, async ({ kib }) => ({
    content: [{ type: "text", text: "x".repeat(kib * 1024) }],
  }));
  mcp.tool("slow", "Says it is working, then answers a second later", {}, async (_args, extra) => {
    await extra.sendNotification({ method: "notifications/message", params: { level: "info", data: "working" } });
    await new Promise((done) => setTimeout(done, 1500));
    return { content: [{ type: "text", text: "done" }] };
  });
  mcp.tool("rm", "A tool no run should call", {}, async () => ({
    content: [{ type: "text", text: "removed everything" }],
  }));
  return mcp;
}

// With --stateful, sessions: an initialize opens one (Mcp-Session-Id),
// later requests must carry it, GET opens the server's stream, DELETE ends
// it. The counts of sessions opened and ended are served at /stats.
const stateful = process.argv.includes("--stateful");
const sessions = new Map();
const stats = { opened: 0, ended: 0, streams: 0 };

async function handleStateful(req, res) {
  const id = req.headers["mcp-session-id"];
  let transport = id && sessions.get(id);
  if (!transport) {
    if (id || req.method !== "POST") {
      res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32001, message: "no such session" } }));
      return;
    }
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      enableJsonResponse: json,
      onsessioninitialized: (sid) => {
        sessions.set(sid, transport);
        stats.opened += 1;
      },
      onsessionclosed: (sid) => {
        sessions.delete(sid);
        stats.ended += 1;
      },
    });
    await server().connect(transport);
  }
  if (req.method === "GET") stats.streams += 1;
  await transport.handleRequest(req, res);
}

// With --tls KEY CERT, HTTPS.
const tlsAt = process.argv.indexOf("--tls");
const tlsOptions = tlsAt > 0 ? { key: readFileSync(process.argv[tlsAt + 1]), cert: readFileSync(process.argv[tlsAt + 2]) } : null;

const handler = async (req, res) => {
  if (req.url === "/stats") {
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(stats));
    return;
  }
  if (!req.url.startsWith("/mcp")) {
    res.writeHead(404).end();
    return;
  }
  try {
    if (stateful) {
      await handleStateful(req, res);
      return;
    }
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: json });
    const mcp = server();
    res.on("close", () => {
      transport.close();
      mcp.close();
    });
    await mcp.connect(transport);
    await transport.handleRequest(req, res);
  } catch (e) {
    if (!res.headersSent) res.writeHead(500).end(String(e));
  }
};
const httpServer = tlsOptions ? https.createServer(tlsOptions, handler) : http.createServer(handler);

httpServer.listen(0, "127.0.0.1", () => console.log(`listening on ${httpServer.address().port}`));
