import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { openSecret, sealSecret } from '../../auth/secret-box.js';
import { appError } from '../../errors/index.js';
import { isUuid } from '../agents/config.js';
import { guardedFetch, TOOL_RESPONSE_MAX_BYTES } from '../agents/guarded-fetch.js';
import { loadMcpClient } from '../agents/mcp-client.js';
import { assertOutboundUrlAccepted, type OutboundPolicy } from '../agents/outbound.js';

const PURPOSE = 'tool-server-auth';
const PROBE_TIMEOUT_MS = 15_000;

export interface ToolServerDto {
  id: string;
  workspaceId: string;
  name: string;
  url: string;
  enabled: boolean;
  authHeaderName: string | null;
  tools: { name: string; description: string | null }[];
  createdAt: string;
  updatedAt: string;
}

interface Row {
  id: string;
  workspace_id: string;
  name: string;
  url: string;
  enabled: boolean;
  auth_header_name: string | null;
  auth_header_secret: string | null;
  tools: ToolServerDto['tools'] | string;
  created_at: Date;
  updated_at: Date;
}

const toDto = (r: Row): ToolServerDto => ({
  id: r.id,
  workspaceId: r.workspace_id,
  name: r.name,
  url: r.url,
  enabled: r.enabled,
  authHeaderName: r.auth_header_name,
  tools: typeof r.tools === 'string' ? JSON.parse(r.tools) : r.tools,
  createdAt: new Date(r.created_at).toISOString(),
  updatedAt: new Date(r.updated_at).toISOString(),
});

/**
 * Talks to an MCP server over the real protocol (Streamable HTTP, the same client agent turns
 * use) after the outbound guard accepted its URL: initialize, list tools, end the session.
 */
export async function probeMcpServer(
  url: string,
  headers: Record<string, string>,
  policy: OutboundPolicy,
): Promise<ToolServerDto['tools']> {
  await assertOutboundUrlAccepted(url, policy, 'url', { unresolvable: 'refuse' });
  const { Client, StreamableHTTPClientTransport } = await loadMcpClient();
  const client = new Client({ name: 'ai-suite-connect', version: '1.0.0' });
  const signal = AbortSignal.timeout(PROBE_TIMEOUT_MS);
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers, signal },
    // The URL was checked above; the connection is checked again as it is made (DNS rebinding).
    fetch: guardedFetch(policy, { maxBytes: TOOL_RESPONSE_MAX_BYTES }),
  });
  try {
    await client.connect(transport, { signal, timeout: PROBE_TIMEOUT_MS });
    const listed = await client.listTools(undefined, { signal, timeout: PROBE_TIMEOUT_MS });
    await transport.terminateSession().catch(() => undefined);
    return listed.tools.map((t) => ({ name: t.name, description: t.description ?? null }));
  } catch (err) {
    const reason = (err instanceof Error ? err.message : String(err)).slice(0, 300);
    throw appError('TOOL_SERVER_UNREACHABLE', { reason, details: { url } });
  } finally {
    await client.close().catch(() => undefined);
  }
}

/** A connected server as an agent turn uses it; `enabled: false` ones are not offered. */
export interface ConnectedServer {
  id: string;
  name: string;
  url: string;
  enabled: boolean;
  headers: Record<string, string>;
}

/** The workspace's connected servers among `ids` (others are simply absent: disconnected). */
export async function connectedServers(
  em: EntityManager,
  workspaceId: string,
  signingSecret: string,
  ids: string[],
): Promise<Map<string, ConnectedServer>> {
  const valid = ids.filter(isUuid);
  if (valid.length === 0) return new Map();
  const rows = await em.execute<Row[]>(
    `select * from tool_servers where workspace_id = ? and id in (${valid.map(() => '?').join(', ')})`,
    [workspaceId, ...valid],
  );
  return new Map(
    rows.map((r) => {
      const headers: Record<string, string> = {};
      if (r.auth_header_name && r.auth_header_secret) {
        const value = openSecret(signingSecret, PURPOSE, r.auth_header_secret);
        if (value !== undefined) headers[r.auth_header_name] = value;
      }
      return [r.id, { id: r.id, name: r.name, url: r.url, enabled: r.enabled, headers }];
    }),
  );
}

/** MCP servers connected to a workspace by its owners and admins (sessions only). */
export class ToolServersService {
  constructor(
    private readonly em: EntityManager,
    private readonly signingSecret: string,
    private readonly policy: OutboundPolicy,
  ) {}

  async list(workspaceId: string): Promise<ToolServerDto[]> {
    const rows = await this.em.execute<Row[]>(
      'select * from tool_servers where workspace_id = ? order by created_at, name',
      [workspaceId],
    );
    return rows.map(toDto);
  }

  private async require(workspaceId: string, id: string): Promise<Row> {
    const rows = isUuid(id)
      ? await this.em.execute<Row[]>('select * from tool_servers where id = ? and workspace_id = ?', [
          id,
          workspaceId,
        ])
      : [];
    if (!rows[0]) throw appError('TOOL_SERVER_NOT_FOUND');
    return rows[0];
  }

  /** Checks the server over MCP (tool list recorded), then stores it; the auth value sealed. */
  async connect(
    workspaceId: string,
    userId: string | null,
    input: { name: string; url: string; authHeader?: { name: string; value: string } },
  ): Promise<ToolServerDto> {
    let url: URL;
    try {
      url = new URL(input.url);
    } catch {
      throw appError('TOOL_SERVER_URL_NOT_HTTP', { details: { field: 'url' } });
    }
    const existing = await this.em.execute(
      'select 1 from tool_servers where workspace_id = ? and lower(name) = lower(?)',
      [workspaceId, input.name],
    );
    if (existing.length > 0) throw appError('TOOL_SERVER_NAME_TAKEN', { name: input.name });
    const headers = input.authHeader ? { [input.authHeader.name]: input.authHeader.value } : {};
    const tools = await probeMcpServer(url.toString(), headers, this.policy);
    const id = randomUUID();
    const rows = await this.em.execute<Row[]>(
      `insert into tool_servers (id, workspace_id, name, url, auth_header_name, auth_header_secret, tools, created_by)
       values (?, ?, ?, ?, ?, ?, ?::jsonb, ?)
       on conflict (workspace_id, lower(name)) do nothing returning *`,
      [
        id,
        workspaceId,
        input.name,
        url.toString(),
        input.authHeader?.name ?? null,
        input.authHeader ? sealSecret(this.signingSecret, PURPOSE, input.authHeader.value) : null,
        JSON.stringify(tools),
        userId,
      ],
    );
    if (!rows[0]) throw appError('TOOL_SERVER_NAME_TAKEN', { name: input.name });
    return toDto(rows[0]);
  }

  async setEnabled(workspaceId: string, id: string, enabled: boolean): Promise<ToolServerDto> {
    await this.require(workspaceId, id);
    const rows = await this.em.execute<Row[]>(
      'update tool_servers set enabled = ?, updated_at = now() where id = ? and workspace_id = ? returning *',
      [enabled, id, workspaceId],
    );
    if (!rows[0]) throw appError('TOOL_SERVER_NOT_FOUND');
    return toDto(rows[0]);
  }

  async disconnect(workspaceId: string, id: string): Promise<void> {
    if (!isUuid(id)) throw appError('TOOL_SERVER_NOT_FOUND');
    const rows = await this.em.execute(
      'delete from tool_servers where id = ? and workspace_id = ? returning id',
      [id, workspaceId],
    );
    if (rows.length === 0) throw appError('TOOL_SERVER_NOT_FOUND');
  }
}
