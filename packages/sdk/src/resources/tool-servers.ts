import type { AiSuite } from '../client.js';
import type { APIPromise } from '../core/api-promise.js';
import type { ToolServer } from './types.js';

/**
 * MCP servers connected to the workspace of the client's session. Listing is open to members;
 * connect, enable/disable and disconnect to owners and admins. Agents use a connected server
 * with `capabilities.mcp_servers: [{ toolServerId }]`.
 */
export class ToolServers {
  constructor(private readonly client: AiSuite) {}

  list(opts: { signal?: AbortSignal } = {}): APIPromise<{ toolServers: ToolServer[] }> {
    return this.client.inWorkspace('/tool-servers', (path) =>
      this.client.request({ method: 'GET', path, ...opts }),
    );
  }

  /**
   * Checks the server over MCP and records its tools (`BadRequestError` code
   * `TOOL_SERVER_UNREACHABLE` or `URL_NOT_ALLOWED` otherwise). `authHeader.name` defaults to
   * `Authorization`; the value is stored encrypted and never returned.
   */
  connect(
    body: { name: string; url: string; authHeader?: { name?: string; value: string } },
    opts: { signal?: AbortSignal } = {},
  ): APIPromise<{ toolServer: ToolServer }> {
    return this.client.inWorkspace('/tool-servers', (path) =>
      this.client.request({ method: 'POST', path, body, maxRetries: 0, ...opts }),
    );
  }

  /** A disabled server is not offered to agent turns. */
  setEnabled(
    toolServerId: string,
    enabled: boolean,
    opts: { signal?: AbortSignal } = {},
  ): APIPromise<{ toolServer: ToolServer }> {
    return this.client.inWorkspace(`/tool-servers/${encodeURIComponent(toolServerId)}`, (path) =>
      this.client.request({ method: 'PATCH', path, body: { enabled }, ...opts }),
    );
  }

  disconnect(
    toolServerId: string,
    opts: { signal?: AbortSignal } = {},
  ): APIPromise<{ disconnected: true; toolServerId: string }> {
    return this.client.inWorkspace(`/tool-servers/${encodeURIComponent(toolServerId)}`, (path) =>
      this.client.request({ method: 'DELETE', path, ...opts }),
    );
  }
}
