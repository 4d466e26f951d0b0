// A 2025-11-25 MCP client built on the TypeScript SDK v1
// (@modelcontextprotocol/sdk), for the Go interoperability tests
// (../../legacy_test.go). It talks to the tidings server at the URL given
// as its argument, the way every client of that era does (initialize, a
// session, a GET stream), and prints one JSON object per line to stdout,
// each with a "step" field, for the test to check:
//
//   connected    protocol version, serverInfo, capabilities and session id
//   ping         ping answered
//   loglevel     logging/setLevel answered
//   tools        every tool name, across pages
//   greet        the result of tools/call greet {name: "sdk1"}
//   elicitation  the message of the elicitation/create the server sent
//   confirm      the result of tools/call confirm (answered: accept,
//                proceed=true)
//   read         the text of resources/read config://app
//   subscribed   resources/subscribe config://app answered
//   ready        the test should now announce an update of config://app
//                and add a tool
//   updated      a notifications/resources/updated arrived (its uri)
//   changed      a notifications/tools/list_changed arrived
//   tools_after  the tool names listed after the change
//   unsubscribed resources/unsubscribe answered
//   terminated   the session was ended with DELETE
//   error        something failed (then the exit status is 1)
//
// Usage: node sdk1-client.mjs <url>
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
    ElicitRequestSchema,
    ResourceUpdatedNotificationSchema,
    ToolListChangedNotificationSchema
} from '@modelcontextprotocol/sdk/types.js';

const url = process.argv[process.argv.length - 1];

function emit(step, data = {}) {
    process.stdout.write(JSON.stringify({ step, ...data }) + '\n');
}

function texts(result) {
    return (result.content ?? []).filter(c => c.type === 'text').map(c => c.text);
}

// toolNames walks every page of tools/list (the SDK hands out one page
// per call).
async function toolNames(client) {
    const names = [];
    let cursor;
    do {
        const page = await client.listTools(cursor === undefined ? {} : { cursor });
        names.push(...page.tools.map(t => t.name));
        cursor = page.nextCursor;
    } while (cursor !== undefined);
    return names.sort();
}

// once returns a promise and the function that resolves it.
function once() {
    let resolve;
    const p = new Promise(r => (resolve = r));
    return [p, resolve];
}

async function main() {
    const client = new Client({ name: 'sdk1-interop-client', version: '1.0.0' }, { capabilities: { elicitation: { form: {} } } });
    client.setRequestHandler(ElicitRequestSchema, async request => {
        emit('elicitation', { message: request.params.message });
        return { action: 'accept', content: { proceed: true } };
    });
    const [updatedSeen, updated] = once();
    client.setNotificationHandler(ResourceUpdatedNotificationSchema, n => {
        emit('updated', { uri: n.params.uri });
        updated();
    });
    const [changedSeen, changed] = once();
    client.setNotificationHandler(ToolListChangedNotificationSchema, n => {
        emit('changed', { params: n.params ?? null });
        changed();
    });

    const transport = new StreamableHTTPClientTransport(new URL(url));
    await client.connect(transport);
    emit('connected', {
        protocolVersion: transport.protocolVersion ?? null,
        serverInfo: client.getServerVersion() ?? null,
        capabilities: client.getServerCapabilities() ?? null,
        sessionId: transport.sessionId ?? null
    });

    emit('ping', { result: await client.ping() });
    emit('loglevel', { result: await client.setLoggingLevel('info') });

    emit('tools', { names: await toolNames(client) });

    const greet = await client.callTool({ name: 'greet', arguments: { name: 'sdk1' } });
    emit('greet', { text: texts(greet), isError: greet.isError ?? false });

    const confirm = await client.callTool({ name: 'confirm', arguments: {} });
    emit('confirm', { text: texts(confirm), isError: confirm.isError ?? false });

    const read = await client.readResource({ uri: 'config://app' });
    emit('read', { text: read.contents.map(c => c.text) });

    emit('subscribed', { result: await client.subscribeResource({ uri: 'config://app' }) });
    emit('ready');

    await updatedSeen;
    await changedSeen;
    emit('tools_after', { names: await toolNames(client) });

    emit('unsubscribed', { result: await client.unsubscribeResource({ uri: 'config://app' }) });
    await transport.terminateSession();
    emit('terminated', { sessionId: transport.sessionId ?? null });
    await client.close();
}

const timer = setTimeout(() => {
    emit('error', { message: 'timed out' });
    process.exit(1);
}, 60000);
main().then(
    () => {
        clearTimeout(timer);
        process.exit(0);
    },
    err => {
        emit('error', { message: String(err?.stack ?? err) });
        process.exit(1);
    }
);
