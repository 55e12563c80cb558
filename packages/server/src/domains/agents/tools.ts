import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Logger } from 'pino';
import type { ToolDefinition } from '../../providers/llm.js';
import { type WebSearchProvider, webSearch } from '../../providers/web-search.js';
import { catalogService } from '../catalogs/service.js';
import { connectedServers } from '../tool-servers/service.js';
import { guardedFetch, RESPONSE_TOO_LARGE } from './guarded-fetch.js';
import { loadMcpClient } from './mcp-client.js';
import { assertUrlAllowed, htmlToText, type OutboundPolicy, outboundRequest } from './outbound.js';
import { type AgentConfig, isMcpServerRef, type McpServerItem } from './schema.js';
import type { AgentRow } from './service.js';
import { webhookHeaders } from './webhook-signature.js';

/** Where a tool runs: in the service (platform, callback, MCP) or with the integrator. */
export type ToolOwner = 'platform' | 'callback' | 'mcp' | 'integrator';

export interface AgentTool {
  definition: ToolDefinition;
  owner: ToolOwner;
  /** Runs the tool in the service; absent for integrator-owned tools. */
  run?: (args: Record<string, unknown>, signal: AbortSignal) => Promise<unknown>;
}

export interface ToolEnv {
  em: () => EntityManager;
  log: Logger;
  policy: OutboundPolicy;
  searchProviders: Map<string, WebSearchProvider>;
  signingSecret: string;
  callbackTimeoutMs: number;
  /** The largest answer a callback or an MCP server may send to one request. */
  toolResponseMaxBytes: number;
  fetchMaxBytes: number;
  fetchTimeoutMs: number;
}

export interface ToolContext {
  agent: AgentRow;
  config: AgentConfig;
  workspaceId: string;
  sessionId: string | null;
  runId: string;
}

/** A tool failure reported back to the model (never a crashed loop). */
export class ToolError extends Error {
  override name = 'ToolError';
}

const schemaOf = (s: unknown): Record<string, unknown> =>
  s && typeof s === 'object' ? (s as Record<string, unknown>) : { type: 'object', properties: {} };

/**
 * The tools one turn may call: platform tools enabled by capabilities or bindings, custom
 * tools, integration-pack tools of enabled bindings, and the tools of the MCP servers; all
 * filtered by `toolAllowlist` when it is set. Returns a closer for the MCP connections.
 */
/** A configured MCP server the turn could not use; the turn reports it (`warning` event). */
export interface McpServerWarning {
  server: string;
  message: string;
}

/** How long ending an MCP session may take before the connection is simply closed. */
const MCP_TERMINATE_TIMEOUT_MS = 5_000;

/**
 * The MCP servers a turn talks to: inline ones as configured, and references to connected
 * tool servers resolved to their URL and (decrypted) auth header. A reference to a disabled or
 * disconnected server is skipped with a warning: its tools are not offered.
 */
async function mcpServersOfTurn(
  env: ToolEnv,
  ctx: ToolContext,
  items: McpServerItem[],
  warnings: McpServerWarning[],
): Promise<{ name: string; url: string; headers?: Record<string, string>; allowedTools?: string[] }[]> {
  const refs = items.filter(isMcpServerRef);
  const connected =
    refs.length > 0
      ? await connectedServers(
          env.em(),
          ctx.workspaceId,
          env.signingSecret,
          refs.map((r) => r.toolServerId),
        )
      : new Map();
  const out = [];
  for (const item of items) {
    if (!isMcpServerRef(item)) {
      out.push(item);
      continue;
    }
    const server = connected.get(item.toolServerId);
    if (!server?.enabled) {
      const label = server?.name ?? item.toolServerId;
      warnings.push({
        server: label,
        message: `Tool server "${label}" is ${server ? 'disabled' : 'disconnected'}; its tools are not offered in this turn`,
      });
      continue;
    }
    out.push({
      name: server.name,
      url: server.url,
      headers: server.headers,
      allowedTools: item.allowedTools,
    });
  }
  return out;
}

export async function buildToolset(
  env: ToolEnv,
  ctx: ToolContext,
  signal: AbortSignal,
): Promise<{ tools: Map<string, AgentTool>; warnings: McpServerWarning[]; close: () => Promise<void> }> {
  const { config, agent } = ctx;
  const tools = new Map<string, AgentTool>();
  const platform = new Map(catalogService.platformToolDefinitions().map((t) => [t.toolId, t]));
  const bound = new Set(agent.tools.filter((t) => t.enabled).map((t) => t.toolId));
  const wants = (id: string) =>
    bound.has(id) ||
    (id === 'web_search' && config.capabilities.tools.web_search) ||
    (id === 'web_fetch' && config.capabilities.tools.web_fetch) ||
    ((id === 'memory_search' || id === 'memory_save') && config.capabilities.memory.enabled);

  const addPlatform = (id: string, run: AgentTool['run']) => {
    const def = platform.get(id);
    if (!def || !wants(id)) return;
    tools.set(id, {
      owner: 'platform',
      definition: { name: id, description: def.description, parameters: schemaOf(def.inputSchema) },
      run,
    });
  };
  addPlatform('web_fetch', (args, s) => webFetch(env, String(args.url ?? ''), s));
  addPlatform('web_search', async (args, s) => ({
    results: await webSearch(
      env.searchProviders,
      config.capabilities.tools.web_provider,
      String(args.query ?? ''),
      Math.min(10, Math.max(1, Number(args.maxResults ?? 5) || 5)),
      s,
    ),
  }));
  addPlatform('memory_search', (args) =>
    memorySearch(env, ctx, String(args.query ?? ''), Number(args.limit ?? 5)),
  );
  addPlatform('memory_save', (args) => memorySave(env, ctx, String(args.content ?? '')));

  for (const t of config.customTools) {
    const url = t.callbackUrl;
    tools.set(t.name, {
      owner: url ? 'callback' : 'integrator',
      definition: { name: t.name, description: t.description, parameters: schemaOf(t.inputSchema) },
      run: url ? (args, s) => callCallback(env, ctx, t.name, url, args, s) : undefined,
    });
  }

  // Pack tools of enabled integration bindings and pack tool bindings run with the integrator.
  const packIds = new Set(agent.integrationBindings.filter((b) => b.enabled).map((b) => b.packId));
  for (const pack of catalogService.listPacks()) {
    for (const pt of catalogService.getPack(pack.id).tools) {
      if (!packIds.has(pack.id) && !bound.has(pt.toolId)) continue;
      const name = pt.toolId.replace(/[^a-zA-Z0-9_-]/g, '_');
      tools.set(name, {
        owner: 'integrator',
        definition: { name, description: pt.description, parameters: schemaOf(pt.inputSchema) },
      });
    }
  }

  const connections: { client: Client; transport: StreamableHTTPClientTransport }[] = [];
  const warnings: McpServerWarning[] = [];
  // Ends each MCP session (streamable HTTP `DELETE` with its session id) before closing the
  // connection: servers keep per-session state until told, so sessions must not pile up.
  const close = async () => {
    await Promise.all(
      connections.map(async ({ client, transport }) => {
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([
          transport.terminateSession().catch(() => undefined),
          new Promise((r) => {
            timer = setTimeout(r, MCP_TERMINATE_TIMEOUT_MS);
          }),
        ]);
        clearTimeout(timer);
        await client.close().catch(() => undefined);
      }),
    );
  };
  for (const server of await mcpServersOfTurn(env, ctx, config.capabilities.mcp_servers, warnings)) {
    try {
      const url = new URL(server.url);
      await assertUrlAllowed(url, env.policy);
      const { Client, StreamableHTTPClientTransport } = await loadMcpClient();
      const client = new Client({ name: 'ai-suite-agent', version: '1.0.0' });
      const transport = new StreamableHTTPClientTransport(url, {
        requestInit: { headers: server.headers ?? {}, signal },
        // Every connection through the guard's lookup (DNS rebinding), every answer bounded.
        fetch: guardedFetch(env.policy, { maxBytes: env.toolResponseMaxBytes }),
      });
      // An answer cut at the bound inside an event stream reaches the SDK as a dropped stream,
      // not as the failure of the call it carried: the calls in flight fail at once instead of
      // waiting out their timeout.
      let oversize = new AbortController();
      client.onerror = (err) => {
        if (!(err instanceof Error) || !err.message.includes(RESPONSE_TOO_LARGE)) return;
        oversize.abort(new ToolError(`MCP server answer exceeds ${env.toolResponseMaxBytes} bytes`));
        oversize = new AbortController();
      };
      await client.connect(transport, { signal, timeout: 15_000 });
      connections.push({ client, transport });
      const listed = await client.listTools(undefined, { signal, timeout: 15_000 });
      for (const tool of listed.tools) {
        if (server.allowedTools && !server.allowedTools.includes(tool.name)) continue;
        const name = `${server.name}__${tool.name}`.replace(/[^a-zA-Z0-9_-]/g, '_').slice(0, 64);
        tools.set(name, {
          owner: 'mcp',
          definition: { name, description: tool.description, parameters: schemaOf(tool.inputSchema) },
          run: async (args, s) => {
            const cut = oversize.signal;
            const res = await client
              .callTool({ name: tool.name, arguments: args }, undefined, {
                signal: AbortSignal.any([s, cut]),
                timeout: env.callbackTimeoutMs,
              })
              .catch((err) => {
                throw cut.aborted && !s.aborted ? cut.reason : err;
              });
            const content = (res.content ?? []) as { type: string; text?: string }[];
            const text = content
              .filter((c) => c.type === 'text')
              .map((c) => c.text ?? '')
              .join('\n');
            if (res.isError) throw new ToolError(text || 'MCP tool failed');
            return res.structuredContent ?? text;
          },
        });
      }
    } catch (err) {
      if (signal.aborted) {
        await close();
        throw err;
      }
      env.log.warn({ err, server: server.name }, 'MCP server unavailable; its tools are skipped');
      const reason = err instanceof Error ? err.message : String(err);
      warnings.push({
        server: server.name,
        message: `MCP server "${server.name}" is unavailable (${reason.slice(0, 300)}); its tools are not offered in this turn`,
      });
    }
  }

  if (Array.isArray(config.toolAllowlist)) {
    const allow = new Set(config.toolAllowlist);
    for (const name of [...tools.keys()]) if (!allow.has(name)) tools.delete(name);
  }
  return {
    tools,
    warnings,
    close,
  };
}

async function webFetch(env: ToolEnv, rawUrl: string, signal: AbortSignal) {
  let url: URL;
  try {
    url = new URL(rawUrl);
  } catch {
    throw new ToolError('url must be an absolute http(s) URL');
  }
  const res = await outboundRequest(url.toString(), {
    policy: env.policy,
    timeoutMs: env.fetchTimeoutMs,
    maxBytes: env.fetchMaxBytes,
    signal,
    headers: { accept: 'text/html,text/plain,application/json;q=0.9,*/*;q=0.5' },
  });
  const type = String(res.headers['content-type'] ?? '');
  const raw = res.body.toString('utf8');
  const text = /html/i.test(type) ? htmlToText(raw) : raw;
  return { url: url.toString(), status: res.status, contentType: type, truncated: res.truncated, text };
}

async function callCallback(
  env: ToolEnv,
  ctx: ToolContext,
  name: string,
  url: string,
  args: Record<string, unknown>,
  signal: AbortSignal,
) {
  const id = `cb_${randomUUID()}`;
  const body = JSON.stringify({
    type: 'tool_call',
    id,
    agentId: ctx.agent.id,
    sessionId: ctx.sessionId,
    runId: ctx.runId,
    tool: name,
    arguments: args,
    timestamp: new Date().toISOString(),
  });
  const res = await outboundRequest(url, {
    policy: env.policy,
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...webhookHeaders(env.signingSecret, ctx.agent.id, { id, event: 'tool_call', body }),
    },
    body,
    timeoutMs: env.callbackTimeoutMs,
    maxBytes: env.toolResponseMaxBytes,
    signal,
  });
  if (res.truncated) {
    throw new ToolError(`Callback answer exceeds ${env.toolResponseMaxBytes} bytes`);
  }
  const text = res.body.toString('utf8');
  if (res.status < 200 || res.status >= 300) {
    throw new ToolError(`Callback answered ${res.status}${text ? `: ${text.slice(0, 500)}` : ''}`);
  }
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    /* plain text answer */
  }
  if (parsed && typeof parsed === 'object' && 'error' in parsed && typeof parsed.error === 'string') {
    throw new ToolError(parsed.error);
  }
  if (parsed && typeof parsed === 'object' && 'result' in parsed)
    return (parsed as { result: unknown }).result;
  return parsed;
}

/** The app id of the memory scope: the agent, or null for the workspace-wide scope. */
const scopeAppId = (ctx: ToolContext) =>
  ctx.config.capabilities.memory.scope === 'workspace' ? null : ctx.agent.id;

export async function memoryNotes(em: EntityManager, ctx: ToolContext, limit = 20): Promise<string[]> {
  const appId = scopeAppId(ctx);
  const rows = await em.execute<{ content: string }[]>(
    `select content from agent_memories where workspace_id = ? and ${appId ? 'app_id = ?' : 'app_id is null'}
     order by created_at desc limit ?`,
    appId ? [ctx.workspaceId, appId, limit] : [ctx.workspaceId, limit],
  );
  return rows.map((r) => r.content).reverse();
}

async function memorySearch(env: ToolEnv, ctx: ToolContext, query: string, limit: number) {
  const appId = scopeAppId(ctx);
  const words = query
    .toLowerCase()
    .split(/\W+/)
    .filter((w) => w.length > 1)
    .slice(0, 8);
  const like = words.map(() => 'lower(content) like ?').join(' or ') || 'true';
  const rows = await env.em().execute<{ content: string; created_at: Date }[]>(
    `select content, created_at from agent_memories
     where workspace_id = ? and ${appId ? 'app_id = ?' : 'app_id is null'} and (${like})
     order by created_at desc limit ?`,
    [
      ctx.workspaceId,
      ...(appId ? [appId] : []),
      ...words.map((w) => `%${w.replace(/[\\%_]/g, (c) => `\\${c}`)}%`),
      Math.min(20, Math.max(1, limit || 5)),
    ],
  );
  return {
    notes: rows.map((r) => ({ content: r.content, createdAt: new Date(r.created_at).toISOString() })),
  };
}

async function memorySave(env: ToolEnv, ctx: ToolContext, content: string) {
  const text = content.trim().slice(0, 4000);
  if (!text) throw new ToolError('content is required');
  await env
    .em()
    .execute('insert into agent_memories (id, workspace_id, app_id, content) values (?, ?, ?, ?)', [
      randomUUID(),
      ctx.workspaceId,
      scopeAppId(ctx),
      text,
    ]);
  return { saved: true };
}
