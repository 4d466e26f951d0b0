// A 2025-11-25 MCP server built on the TypeScript SDK v1
// (@modelcontextprotocol/sdk) whose tools change when a caller asks, for
// the gateway test of ../../peers (gateway_test.go). It is the TypeScript
// counterpart of the Go peers' -change flag: one set of tools shared by
// every session, so that a change asked on one session is announced on all
// (each on its session's GET stream, where the SDK sends notifications
// that belong to no request).
//
// Usage: node sdk1-change-server.mjs [port]   Streamable HTTP, stateful
//                                             (one session per initialize),
//                                             on 127.0.0.1 at /mcp; prints
//                                             {"url":"http://127.0.0.1:PORT/mcp"}
//
// Tools:
//   echo {text}            answers with text
//   change {what}          "add" adds flicker, "remove" removes it,
//                          "reshape" flips the input schema of shape
//                          between narrow {text} and wide {text, times}
//   shape {text[, times]}  answers with the form its schema has now
//   flicker {}             there between an add and a remove
// It exits on SIGINT, SIGTERM or the end of its stdin.
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import * as z from 'zod';

const port = Number(process.argv[2] ?? 0);

// What every session's tools are now.
let flickerOn = false;
let shape = 'narrow';
// Every session: its McpServer and the tools that change on it.
const sessions = new Set();

function text(s) {
    return { content: [{ type: 'text', text: s }] };
}

function shapeSchema(form) {
    const narrow = { text: z.string().describe('the text to send back') };
    return form === 'wide' ? { ...narrow, times: z.number().int().optional().describe('how many times') } : narrow;
}

function addFlicker(entry) {
    entry.flicker = entry.server.registerTool('flicker', { description: 'Here one moment, gone the next.' }, async () => text('still here'));
}

// change applies one change to the shared state and to every session's
// server; the SDK announces each on that session.
function change(what) {
    switch (what) {
        case 'add':
            if (!flickerOn) {
                flickerOn = true;
                for (const s of sessions) addFlicker(s);
            }
            return 'flicker is there';
        case 'remove':
            if (flickerOn) {
                flickerOn = false;
                for (const s of sessions) {
                    s.flicker?.remove();
                    s.flicker = undefined;
                }
            }
            return 'flicker is gone';
        case 'reshape':
            shape = shape === 'wide' ? 'narrow' : 'wide';
            for (const s of sessions) s.shape.update({ paramsSchema: shapeSchema(shape) });
            return `shape is ${shape} now`;
    }
    throw new Error(`what is ${JSON.stringify(what)}; want add, remove or reshape`);
}

function build() {
    const server = new McpServer({ name: 'sdk1-change-server', version: '1.0.0' }, { capabilities: { tools: { listChanged: true } } });
    const entry = { server };
    server.registerTool('echo', { description: 'Echoes text', inputSchema: { text: z.string() } }, async ({ text: t }) => text(t));
    server.registerTool(
        'change',
        { description: "Changes this server's tools", inputSchema: { what: z.enum(['add', 'remove', 'reshape']) } },
        async ({ what }) => text(change(what))
    );
    entry.shape = server.registerTool(
        'shape',
        { description: 'Answers with the form of its input schema.', inputSchema: shapeSchema(shape) },
        async () => text(shape)
    );
    if (flickerOn) addFlicker(entry);
    sessions.add(entry);
    server.server.onclose = () => sessions.delete(entry);
    return server;
}

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
            // server/discover included.
            res.writeHead(sid ? 404 : 400, { 'content-type': 'application/json' });
            res.end(
                JSON.stringify({
                    jsonrpc: '2.0',
                    error: { code: sid ? -32001 : -32000, message: sid ? 'Session not found' : 'Bad Request: No valid session ID provided' },
                    id: null
                })
            );
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
