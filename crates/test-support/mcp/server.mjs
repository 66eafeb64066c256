// A real MCP server, the official TypeScript SDK's, for gatehouse's tests:
// Streamable HTTP on a loopback port (printed as "listening on PORT"), at
// /mcp, stateless (a server and transport per request). With --json it
// answers POSTs with JSON; without, with SSE streams.
//
// Tools: echo (its text back, with the Authorization header the server
// received and its SHA-256, so a test sees the leased credential arrive), big (a result of
// the asked size), rm (a tool a run should never be let call).
import { createHash } from "node:crypto";
import http from "node:http";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { z } from "zod";

const json = process.argv.includes("--json");

function server() {
  const mcp = new McpServer({ name: "gatehouse-test", version: "1.0.0" });
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
  mcp.tool("rm", "A tool no run should call", {}, async () => ({
    content: [{ type: "text", text: "removed everything" }],
  }));
  return mcp;
}

const httpServer = http.createServer(async (req, res) => {
  if (!req.url.startsWith("/mcp")) {
    res.writeHead(404).end();
    return;
  }
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: json });
  const mcp = server();
  res.on("close", () => {
    transport.close();
    mcp.close();
  });
  try {
    await mcp.connect(transport);
    await transport.handleRequest(req, res);
  } catch (e) {
    if (!res.headersSent) res.writeHead(500).end(String(e));
  }
});

httpServer.listen(0, "127.0.0.1", () => console.log(`listening on ${httpServer.address().port}`));
