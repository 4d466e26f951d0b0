// A 2026-07-28 MCP client built on the TypeScript SDK v2, for the Go
// interoperability tests (interop_test.go). It talks to the server at the
// URL given as its argument and prints one JSON object per line to stdout,
// each with a "step" field, for the test to check:
//
//   connected   serverInfo and the negotiated protocol version
//   listen      the filter the server acknowledged for subscriptions/listen
//   tools       every tool name (listTools walks all pages)
//   greet       the result of tools/call greet {name: "interop"}
//   regional    the result of tools/call regional {region: "eu-west"}
//               (the SDK mirrors the x-mcp-header argument)
//   confirm     the result of tools/call confirm, which needs an
//               elicitation first (answered here: accept, proceed=true)
//   resources   every resource URI
//   read        the result of resources/read config://app
//   ready       the test should now change the tool list
//   changed     a notifications/tools/list_changed arrived on the listen
//   tools_after the tool names listed after the change
//   closed      how the subscription ended after close()
//   error       something failed (then the exit status is 1)
//
// Usage: node ts-client.mjs <url>
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const url = process.argv[process.argv.length - 1];

function emit(step, data = {}) {
    process.stdout.write(JSON.stringify({ step, ...data }) + '\n');
}

function texts(result) {
    return (result.content ?? []).filter(c => c.type === 'text').map(c => c.text);
}

async function main() {
    const client = new Client(
        { name: 'ts-interop-client', version: '1.0.0' },
        {
            capabilities: { elicitation: { form: {} } },
            versionNegotiation: { mode: { pin: '2026-07-28' } }
        }
    );
    client.setRequestHandler('elicitation/create', async request => {
        emit('elicitation', { message: request.params.message });
        return { action: 'accept', content: { proceed: true } };
    });
    let changed;
    const changedSeen = new Promise(resolve => (changed = resolve));
    client.setNotificationHandler('notifications/tools/list_changed', notification => {
        emit('changed', { params: notification.params ?? null });
        changed();
    });

    const transport = new StreamableHTTPClientTransport(new URL(url));
    await client.connect(transport);
    emit('connected', { serverInfo: client.getServerVersion() ?? null, protocolVersion: client.getNegotiatedProtocolVersion() ?? null });

    const sub = await client.listen({ toolsListChanged: true });
    emit('listen', { honored: sub.honoredFilter });

    const { tools } = await client.listTools();
    emit('tools', { names: tools.map(t => t.name) });

    emit('greet', { text: texts(await client.callTool({ name: 'greet', arguments: { name: 'interop' } })) });
    emit('regional', { text: texts(await client.callTool({ name: 'regional', arguments: { region: 'eu-west' } })) });
    emit('confirm', { text: texts(await client.callTool({ name: 'confirm', arguments: {} })) });

    const { resources } = await client.listResources();
    emit('resources', { uris: resources.map(r => r.uri) });
    const read = await client.readResource({ uri: 'config://app' });
    emit('read', { contents: read.contents });

    emit('ready');
    let timer;
    const timeout = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error('no notifications/tools/list_changed within 15s')), 15000);
    });
    await Promise.race([changedSeen, timeout]);
    clearTimeout(timer);

    const after = await client.listTools();
    emit('tools_after', { names: after.tools.map(t => t.name) });

    await sub.close();
    emit('closed', { how: await sub.closed });
    await client.close();
}

main().then(
    () => process.exit(0),
    err => {
        emit('error', { message: String(err?.stack ?? err) });
        process.exit(1);
    }
);
