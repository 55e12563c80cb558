import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';

export interface McpToolSpec {
  name: string;
  description?: string;
  inputSchema?: Record<string, unknown>;
  /** Returns text, or throws to answer with `isError`. */
  handler(args: Record<string, unknown>): unknown | Promise<unknown>;
}

export interface TestMcpServer {
  /** Streamable HTTP endpoint, `http://127.0.0.1:<port>/mcp`. */
  url: string;
  calls: { name: string; arguments: Record<string, unknown> }[];
  close(): Promise<void>;
}

/** The default tools: `add` {a, b} → sum, `fail` → an MCP tool error. */
export const DEFAULT_MCP_TOOLS: McpToolSpec[] = [
  {
    name: 'add',
    description: 'Adds two numbers',
    inputSchema: {
      type: 'object',
      properties: { a: { type: 'number' }, b: { type: 'number' } },
      required: ['a', 'b'],
    },
    handler: (args) => String(Number(args.a) + Number(args.b)),
  },
  {
    name: 'fail',
    description: 'Always fails',
    inputSchema: { type: 'object', properties: {} },
    handler: () => {
      throw new Error('this tool always fails');
    },
  },
];

/**
 * A real MCP server built with `@modelcontextprotocol/sdk`, served over Streamable HTTP on
 * loopback (stateless: a server and transport per request). With `requireHeader`, requests
 * without that header and value get 401.
 */
export async function startTestMcpServer(
  tools: McpToolSpec[] = DEFAULT_MCP_TOOLS,
  opts: { requireHeader?: { name: string; value: string } } = {},
): Promise<TestMcpServer> {
  const calls: TestMcpServer['calls'] = [];
  const build = () => {
    const server = new Server(
      { name: 'ai-suite-test-mcp', version: '1.0.0' },
      { capabilities: { tools: {} } },
    );
    server.setRequestHandler(ListToolsRequestSchema, async () => ({
      tools: tools.map((t) => ({
        name: t.name,
        description: t.description,
        inputSchema: (t.inputSchema ?? { type: 'object', properties: {} }) as { type: 'object' },
      })),
    }));
    server.setRequestHandler(CallToolRequestSchema, async (req) => {
      const tool = tools.find((t) => t.name === req.params.name);
      const args = (req.params.arguments ?? {}) as Record<string, unknown>;
      calls.push({ name: req.params.name, arguments: args });
      if (!tool)
        return { content: [{ type: 'text', text: `Unknown tool ${req.params.name}` }], isError: true };
      try {
        const out = await tool.handler(args);
        return { content: [{ type: 'text', text: typeof out === 'string' ? out : JSON.stringify(out) }] };
      } catch (err) {
        return {
          content: [{ type: 'text', text: err instanceof Error ? err.message : String(err) }],
          isError: true,
        };
      }
    });
    return server;
  };
  const httpServer = http.createServer(async (req, res) => {
    if (!req.url?.startsWith('/mcp')) {
      res.writeHead(404).end();
      return;
    }
    const need = opts.requireHeader;
    if (need && req.headers[need.name.toLowerCase()] !== need.value) {
      res.writeHead(401, { 'content-type': 'application/json' }).end('{"error":"unauthorized"}');
      return;
    }
    const server = build();
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    try {
      await server.connect(transport);
      await transport.handleRequest(req, res);
    } catch {
      if (!res.headersSent) res.writeHead(500).end();
    }
  });
  await new Promise<void>((r) => httpServer.listen(0, '127.0.0.1', r));
  const { port } = httpServer.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    calls,
    close: () =>
      new Promise<void>((resolve) => {
        httpServer.closeAllConnections();
        httpServer.close(() => resolve());
      }),
  };
}
