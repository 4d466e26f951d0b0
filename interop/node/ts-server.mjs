// A 2026-07-28 MCP server built on the TypeScript SDK v2, for the Go
// interoperability tests (interop_test.go). It serves Streamable HTTP on
// 127.0.0.1 at /mcp and prints one JSON line to stdout once it listens:
//
//   {"url":"http://127.0.0.1:PORT/mcp"}
//
// Usage: node ts-server.mjs [port]   (0 or nothing picks a free port)
//
// What it offers:
//   tools     echo {text}, add {a, b}, regional {region, x-mcp-header Region}
//             (answers with the Mcp-Param-Region header it received),
//             confirm {} (asks for an elicitation first, multi round-trip),
//             add_tool {name} (registers a tool called name that answers
//             "I am <name>", then announces notifications/tools/list_changed),
//             bump {} (changes interop://counter, then announces
//             notifications/resources/updated for it)
//   resources listed by a paginated resources/list (two per page):
//             interop://readme, interop://counter, interop://r/1 .. /3;
//             interop://counter reads "count=N"
// tools/list carries ttlMs 60000 (public), so only the change
// notification can make a client re-read it early.
// It exits on SIGTERM or SIGINT, or when its stdin closes.
import { createServer } from 'node:http';

import { toNodeHandler } from '@modelcontextprotocol/node';
import { McpServer, ProtocolError, ProtocolErrorCode, acceptedContent, createMcpHandler, fromJsonSchema, inputRequired } from '@modelcontextprotocol/server';
import * as z from 'zod';

const port = Number(process.argv[2] ?? 0);

// State shared by every per-request server instance.
const added = [];
let counter = 0;

const resources = [
    { uri: 'interop://readme', name: 'readme', mimeType: 'text/plain' },
    { uri: 'interop://counter', name: 'counter', mimeType: 'text/plain' },
    { uri: 'interop://r/1', name: 'r1', mimeType: 'text/plain' },
    { uri: 'interop://r/2', name: 'r2', mimeType: 'text/plain' },
    { uri: 'interop://r/3', name: 'r3', mimeType: 'text/plain' }
];
const pageSize = 2;

let handler;

function text(s) {
    return { content: [{ type: 'text', text: s }] };
}

function build() {
    const server = new McpServer(
        { name: 'ts-interop-server', version: '1.0.0' },
        { cacheHints: { 'tools/list': { ttlMs: 60000, cacheScope: 'public' } } }
    );
    server.registerTool('echo', { description: 'Echoes text', inputSchema: z.object({ text: z.string() }) }, async ({ text: t }) =>
        text(t)
    );
    server.registerTool('add', { description: 'Adds two numbers', inputSchema: z.object({ a: z.number(), b: z.number() }) }, async ({ a, b }) => ({
        content: [{ type: 'text', text: String(a + b) }],
        structuredContent: { sum: a + b }
    }));
    server.registerTool(
        'regional',
        {
            description: 'Reports the Mcp-Param-Region header it received',
            inputSchema: fromJsonSchema({
                type: 'object',
                properties: { region: { type: 'string', 'x-mcp-header': 'Region' } },
                required: ['region']
            })
        },
        async (_args, ctx) => text(ctx.http?.req?.headers.get('mcp-param-region') ?? '<none>')
    );
    server.registerTool('confirm', { description: 'Asks for confirmation first', inputSchema: z.object({}) }, async (_args, ctx) => {
        const answer = acceptedContent(ctx.mcpReq.inputResponses, 'ok');
        if (answer === undefined) {
            return inputRequired({
                inputRequests: {
                    ok: inputRequired.elicit({
                        message: 'Proceed?',
                        requestedSchema: { type: 'object', properties: { proceed: { type: 'boolean' } } }
                    })
                },
                requestState: 'opaque-state-1'
            });
        }
        return text(`confirmed: ${JSON.stringify(answer)} state: ${ctx.mcpReq.requestState?.() ?? ''}`);
    });
    server.registerTool('add_tool', { description: 'Registers a new tool', inputSchema: z.object({ name: z.string() }) }, async ({ name }) => {
        if (!added.includes(name)) added.push(name);
        handler.notify.toolsChanged();
        return text(`added ${name}`);
    });
    server.registerTool('bump', { description: 'Changes interop://counter', inputSchema: z.object({}) }, async () => {
        counter++;
        handler.notify.resourceUpdated('interop://counter');
        return text(`count=${counter}`);
    });
    for (const name of added) {
        server.registerTool(name, { description: 'Added at run time', inputSchema: z.object({}) }, async () => text(`I am ${name}`));
    }

    // Resources through the low-level handlers, for a paginated list.
    const low = server.server;
    low.registerCapabilities({ resources: { subscribe: true, listChanged: true } });
    low.setRequestHandler('resources/list', async request => {
        const start = Number(request.params?.cursor ?? 0);
        const page = resources.slice(start, start + pageSize);
        const next = start + pageSize < resources.length ? String(start + pageSize) : undefined;
        return { resources: page, ...(next === undefined ? {} : { nextCursor: next }), ttlMs: 60000, cacheScope: 'public' };
    });
    low.setRequestHandler('resources/read', async request => {
        const uri = request.params.uri;
        let body;
        if (uri === 'interop://readme') body = 'hello from the TypeScript SDK';
        else if (uri === 'interop://counter') body = `count=${counter}`;
        else if (resources.some(r => r.uri === uri)) body = `content of ${uri}`;
        else throw new ProtocolError(ProtocolErrorCode.InvalidParams, `no resource ${uri}`);
        return { contents: [{ uri, mimeType: 'text/plain', text: body }], ttlMs: 60000, cacheScope: 'public' };
    });
    return server;
}

handler = createMcpHandler(build, { legacy: 'reject', keepAliveMs: 5000 });
const node = toNodeHandler(handler);
const http = createServer((req, res) => {
    node(req, res).catch(err => {
        process.stderr.write(`handler: ${err?.stack ?? err}\n`);
        if (!res.headersSent) res.writeHead(500);
        res.end();
    });
});

function stop() {
    handler.close().finally(() => {
        http.closeAllConnections?.();
        http.close(() => process.exit(0));
    });
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
process.stdin.on('end', stop);
process.stdin.resume();

http.listen(port, '127.0.0.1', () => {
    const { port: p } = http.address();
    process.stdout.write(JSON.stringify({ url: `http://127.0.0.1:${p}/mcp` }) + '\n');
});
