// A 2025-11-25 MCP server built on the TypeScript SDK v1
// (@modelcontextprotocol/sdk), for the Go interoperability tests
// (../../legacy_test.go). The tidings client must detect that it speaks
// only the earlier protocol and fall back to initialize and a session.
//
// Usage: node sdk1-server.mjs http [port]   Streamable HTTP, stateful (one
//                                           session per initialize), on
//                                           127.0.0.1 at /mcp; prints
//                                           {"url":"http://127.0.0.1:PORT/mcp"}
//        node sdk1-server.mjs stdio         the same server on stdin/stdout
//
// What every session offers:
//   tools     echo {text}
//             add_tool {name}: registers a tool called name (answering
//               "I am <name>") on this session's server; the SDK then sends
//               notifications/tools/list_changed on the session's stream
//             confirm {}: asks the client for confirmation with an
//               elicitation/create request tied to the call, then reports
//               the answer
//             confirm_later {}: the same, but the request is not tied to the
//               call, so the SDK sends it on the session's GET stream
//             bump {}: changes interop://counter and sends
//               notifications/resources/updated to every session that
//               subscribed to it
//   resources interop://counter ("count=N"), subscribable
// The HTTP server exits when its stdin closes; the stdio one when stdin ends.
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
    ElicitResultSchema,
    SubscribeRequestSchema,
    UnsubscribeRequestSchema,
    isInitializeRequest
} from '@modelcontextprotocol/sdk/types.js';
import * as z from 'zod';

const mode = process.argv[2] ?? 'http';
const port = Number(process.argv[3] ?? 0);

const COUNTER = 'interop://counter';
let counter = 0;
// Every session's server, with the URIs it subscribed to.
const sessions = new Set();

function text(s) {
    return { content: [{ type: 'text', text: s }] };
}

const confirmSchema = {
    type: 'object',
    properties: { proceed: { type: 'boolean' } },
    required: ['proceed']
};

function build() {
    const server = new McpServer(
        { name: 'sdk1-interop-server', version: '1.0.0' },
        { capabilities: { tools: { listChanged: true }, resources: { subscribe: true, listChanged: true } } }
    );
    const entry = { server, subscribed: new Set() };
    sessions.add(entry);

    server.registerTool('echo', { description: 'Echoes text', inputSchema: { text: z.string() } }, async ({ text: t }) => text(t));
    server.registerTool('add_tool', { description: 'Registers a new tool', inputSchema: { name: z.string() } }, async ({ name }) => {
        server.registerTool(name, { description: 'Added at run time' }, async () => text(`I am ${name}`));
        return text(`added ${name}`);
    });
    server.registerTool('confirm', { description: 'Asks first, on the call' }, async extra => {
        const answer = await extra.sendRequest(
            { method: 'elicitation/create', params: { mode: 'form', message: 'Proceed?', requestedSchema: confirmSchema } },
            ElicitResultSchema
        );
        return text(`${answer.action}: ${JSON.stringify(answer.content ?? null)}`);
    });
    server.registerTool('confirm_later', { description: 'Asks first, on the session stream' }, async () => {
        const answer = await server.server.elicitInput({ message: 'Proceed later?', requestedSchema: confirmSchema });
        return text(`${answer.action}: ${JSON.stringify(answer.content ?? null)}`);
    });
    server.registerTool('bump', { description: 'Changes interop://counter' }, async () => {
        counter++;
        for (const s of sessions) {
            if (s.subscribed.has(COUNTER)) {
                await s.server.server.sendResourceUpdated({ uri: COUNTER }).catch(() => {});
            }
        }
        return text(`count=${counter}`);
    });
    server.registerResource('counter', COUNTER, { mimeType: 'text/plain' }, async uri => ({
        contents: [{ uri: uri.href, mimeType: 'text/plain', text: `count=${counter}` }]
    }));
    server.server.setRequestHandler(SubscribeRequestSchema, async request => {
        entry.subscribed.add(request.params.uri);
        return {};
    });
    server.server.setRequestHandler(UnsubscribeRequestSchema, async request => {
        entry.subscribed.delete(request.params.uri);
        return {};
    });
    server.server.onclose = () => sessions.delete(entry);
    return server;
}

if (mode === 'stdio') {
    await build().connect(new StdioServerTransport());
} else {
    const transports = new Map();
    const http = createServer(async (req, res) => {
        try {
            let body;
            if (req.method === 'POST') {
                const chunks = [];
                for await (const c of req) chunks.push(c);
                body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
            }
            const sid = req.headers['mcp-session-id'];
            let transport = sid ? transports.get(sid) : undefined;
            if (!transport && !sid && req.method === 'POST' && isInitializeRequest(body)) {
                transport = new StreamableHTTPServerTransport({
                    sessionIdGenerator: () => randomUUID(),
                    onsessioninitialized: id => transports.set(id, transport)
                });
                transport.onclose = () => {
                    if (transport.sessionId) transports.delete(transport.sessionId);
                };
                await build().connect(transport);
            }
            if (!transport) {
                // What SDK v1 servers answer to anything outside a session,
                // including server/discover.
                res.writeHead(sid ? 404 : 400, { 'content-type': 'application/json' });
                res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: sid ? -32001 : -32000, message: sid ? 'Session not found' : 'Bad Request: No valid session ID provided' }, id: null }));
                return;
            }
            await transport.handleRequest(req, res, body);
        } catch (err) {
            process.stderr.write(`handler: ${err?.stack ?? err}\n`);
            if (!res.headersSent) res.writeHead(500);
            res.end();
        }
    });
    const stop = () => {
        for (const t of transports.values()) t.close().catch(() => {});
        http.closeAllConnections?.();
        http.close(() => process.exit(0));
    };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
    process.stdin.on('end', stop);
    process.stdin.resume();
    http.listen(port, '127.0.0.1', () => {
        const { port: p } = http.address();
        process.stdout.write(JSON.stringify({ url: `http://127.0.0.1:${p}/mcp` }) + '\n');
    });
}
