// A 2026-07-28 MCP server built on the TypeScript SDK v2 that requires
// OAuth access tokens, for the Go interoperability tests (oauth_test.go).
// It serves Streamable HTTP on 127.0.0.1 at /mcp behind the SDK's
// requireBearerAuth gate and prints one JSON line to stdout once it
// listens:
//
//   {"url":"http://127.0.0.1:PORT/mcp"}
//
// Usage: node ts-oauth-server.mjs ISSUER [port]   (0 or nothing picks a free port)
//
// ISSUER is the authorization server. Its metadata is read once at start
// (OpenID Connect discovery); tokens are JWTs checked against its JWKS:
// signature, issuer, audience (the resource, http://127.0.0.1:PORT/mcp),
// expiry, and the scope mcp:tools. A request without a valid token is
// refused with 401 and WWW-Authenticate: Bearer ... scope="mcp:tools",
// resource_metadata="http://127.0.0.1:PORT/.well-known/oauth-protected-resource/mcp",
// where the SDK serves the Protected Resource Metadata naming ISSUER.
//
// What it offers:
//   tools  whoami {} (answers {"sub", "clientId", "scopes"} of the token
//          the request came with, as text and structured content),
//          echo {text}
// It exits on SIGTERM or SIGINT, or when its stdin closes.
import { createServer } from 'node:http';

import { toNodeHandler } from '@modelcontextprotocol/node';
import {
    McpServer,
    OAuthError,
    OAuthErrorCode,
    createMcpHandler,
    getOAuthProtectedResourceMetadataUrl,
    oauthMetadataResponse,
    requireBearerAuth
} from '@modelcontextprotocol/server';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import * as z from 'zod';

const issuer = process.argv[2];
const port = Number(process.argv[3] ?? 0);
if (!issuer) {
    process.stderr.write('usage: node ts-oauth-server.mjs ISSUER [port]\n');
    process.exit(2);
}
const scope = 'mcp:tools';

const discovery = await fetch(`${issuer.replace(/\/$/, '')}/.well-known/openid-configuration`);
if (!discovery.ok) {
    process.stderr.write(`authorization server metadata: status ${discovery.status}\n`);
    process.exit(1);
}
const asMetadata = await discovery.json();
const jwks = createRemoteJWKSet(new URL(asMetadata.jwks_uri));

function build() {
    const server = new McpServer({ name: 'ts-oauth-interop-server', version: '1.0.0' });
    server.registerTool('whoami', { description: 'Tells whose token the request carried', inputSchema: z.object({}) }, async (_args, ctx) => {
        const auth = ctx.http?.authInfo;
        const who = { sub: auth?.extra?.sub ?? null, clientId: auth?.clientId ?? null, scopes: auth?.scopes ?? [] };
        return { content: [{ type: 'text', text: JSON.stringify(who) }], structuredContent: who };
    });
    server.registerTool('echo', { description: 'Echoes text', inputSchema: z.object({ text: z.string() }) }, async ({ text }) => ({
        content: [{ type: 'text', text }]
    }));
    return server;
}

const handler = createMcpHandler(build, { legacy: 'reject', keepAliveMs: 5000 });

// protect returns the whole HTTP surface for resource: the metadata
// documents, and the MCP endpoint behind the bearer gate.
function protect(resource) {
    // The token must be a JWT of the authorization server, for this
    // resource, unexpired; requireBearerAuth then compares the resource
    // and the scopes, and answers every refusal with its challenge.
    const verifier = {
        async verifyAccessToken(token) {
            let payload;
            try {
                ({ payload } = await jwtVerify(token, jwks, {
                    issuer: asMetadata.issuer,
                    audience: resource.href,
                    algorithms: ['RS256'],
                    requiredClaims: ['exp', 'sub']
                }));
            } catch (error) {
                throw new OAuthError(OAuthErrorCode.InvalidToken, `The token was refused: ${error?.code ?? error?.message ?? error}`);
            }
            const audiences = Array.isArray(payload.aud) ? payload.aud : [payload.aud];
            return {
                token,
                clientId: typeof payload.client_id === 'string' ? payload.client_id : '',
                scopes: typeof payload.scope === 'string' ? payload.scope.split(' ').filter(Boolean) : [],
                expiresAt: payload.exp,
                resource: audiences.length === 1 ? new URL(audiences[0]) : undefined,
                extra: { sub: payload.sub }
            };
        }
    };
    const gate = requireBearerAuth({
        verifier,
        requiredScopes: [scope],
        resourceMetadataUrl: getOAuthProtectedResourceMetadataUrl(resource),
        expectedResource: resource
    });
    const metadata = {
        oauthMetadata: asMetadata,
        resourceServerUrl: resource,
        scopesSupported: [scope],
        resourceName: 'ts-oauth-interop-server'
    };
    return {
        async fetch(request) {
            const document = oauthMetadataResponse(request, metadata);
            if (document !== undefined) return document;
            if (new URL(request.url).pathname !== resource.pathname) return new Response('not found', { status: 404 });
            const auth = await gate(request);
            if (auth instanceof Response) return auth;
            return handler.fetch(request, { authInfo: auth });
        }
    };
}

// node serves requests once the port, and so the resource, is known.
let node;
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
    const resource = new URL(`http://127.0.0.1:${p}/mcp`);
    node = toNodeHandler(protect(resource));
    process.stdout.write(JSON.stringify({ url: resource.href }) + '\n');
});
