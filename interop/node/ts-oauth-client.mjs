// A 2026-07-28 MCP client built on the TypeScript SDK v2 that authorizes
// itself with the SDK's own OAuth support, for the Go interoperability
// test TestTSClientOAuthWithGoServer (oauth_test.go). It connects without
// a token, so the server's 401 challenge sends the SDK through Protected
// Resource Metadata and authorization server discovery to a client
// credentials grant (ClientCredentialsProvider) for the scope the
// challenge names, then retries. It prints one JSON object per line to
// stdout, each with a "step" field:
//
//   connected   serverInfo and the negotiated protocol version
//   tools       every tool name (listTools walks all pages)
//   token       whether the provider holds an access token, and its type
//   error       something failed (then the exit status is 1)
//
// Usage: node ts-oauth-client.mjs <url> <client-id> <client-secret> <issuer>
import { Client, ClientCredentialsProvider, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, clientId, clientSecret, issuer] = process.argv.slice(2);

function emit(step, data = {}) {
    process.stdout.write(JSON.stringify({ step, ...data }) + '\n');
}

async function main() {
    const provider = new ClientCredentialsProvider({ clientId, clientSecret, expectedIssuer: issuer });
    const client = new Client(
        { name: 'ts-interop-oauth-client', version: '1.0.0' },
        { versionNegotiation: { mode: { pin: '2026-07-28' } } }
    );
    const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
    await client.connect(transport);
    emit('connected', { serverInfo: client.getServerVersion() ?? null, protocolVersion: client.getNegotiatedProtocolVersion() ?? null });

    const { tools } = await client.listTools();
    emit('tools', { names: tools.map(t => t.name) });

    const tokens = provider.tokens();
    emit('token', { present: Boolean(tokens?.access_token), type: tokens?.token_type ?? null });
    await client.close();
}

main().then(
    () => process.exit(0),
    err => {
        emit('error', { message: String(err?.stack ?? err) });
        process.exit(1);
    }
);
