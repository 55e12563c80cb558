import type { EntityManager } from '@mikro-orm/postgresql';
import { appError } from '../../errors/index.js';
import { catalogService } from '../catalogs/service.js';
import { connectedServers } from '../tool-servers/service.js';
import { effectiveConfig } from './config.js';
import { isMcpServerRef } from './schema.js';

const sanitize = (name: string) => name.replace(/[^a-zA-Z0-9_-]/g, '_');

/**
 * Checks the names of an agent's effective `toolApproval`: each is `"*"`, a platform tool id,
 * a custom tool of the config, an integration-pack tool (its id, or the name the model sees),
 * or `<server>__<tool>` of an MCP server the config lists (inline by name, or a connected tool
 * server by its name). The first other name is a 400 that names it.
 */
export async function assertToolApprovalNames(
  em: EntityManager,
  workspaceId: string,
  signingSecret: string,
  storedConfig: unknown,
): Promise<void> {
  const config = effectiveConfig(storedConfig);
  const names = config.toolApproval ?? [];
  if (names.length === 0) return;
  const known = new Set<string>(['*']);
  for (const t of catalogService.platformToolDefinitions()) known.add(t.toolId);
  for (const t of config.customTools) known.add(t.name);
  for (const p of catalogService.listPacks()) {
    for (const t of catalogService.getPack(p.id).tools) {
      known.add(t.toolId);
      known.add(sanitize(t.toolId));
    }
  }
  const servers = new Set<string>();
  const refs = config.capabilities.mcp_servers.filter(isMcpServerRef).map((s) => s.toolServerId);
  const connected =
    refs.length > 0 ? await connectedServers(em, workspaceId, signingSecret, refs) : new Map();
  for (const s of config.capabilities.mcp_servers) {
    const name = isMcpServerRef(s) ? connected.get(s.toolServerId)?.name : s.name;
    if (name) servers.add(sanitize(name));
  }
  for (const [i, name] of names.entries()) {
    if (known.has(name)) continue;
    const sep = name.indexOf('__');
    if (sep > 0 && sep < name.length - 2 && servers.has(name.slice(0, sep))) continue;
    const field = `config.toolApproval.${i}`;
    throw appError('APPROVAL_TOOL_UNKNOWN', { field, name, details: { field, tool: name } });
  }
}
