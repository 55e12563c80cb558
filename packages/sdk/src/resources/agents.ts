import type { AiSuite } from '../client.js';
import type { APIPromise } from '../core/api-promise.js';
import { PagePromise, singlePage } from '../core/pagination.js';
import { Schedules } from './schedules.js';
import type {
  AgentConfigInput,
  AgentCreated,
  AgentDetail,
  AgentListItem,
  AgentToolBinding,
  IntegrationBinding,
  ToolApproval,
} from './types.js';

type Opts = { signal?: AbortSignal };

export interface CreateAgentParams {
  /** Required, 1 to 200 characters (`BadRequestError` `name is required` when missing or empty). */
  name: string;
  /** At most 2000 characters; default `Managed agent`. */
  businessUseCase?: string;
  /** At most 4000 characters. */
  description?: string;
  /** System prompt: at most 100,000 characters. */
  prompt?: string;
  /** Partial config, deep-merged over the platform defaults. */
  config?: AgentConfigInput;
  llm?: { componentId: string };
}

export interface UpdateAgentParams {
  /** 1 to 200 characters. */
  name?: string;
  /** At most 4000 characters. */
  description?: string;
  /** At most 2000 characters. */
  businessUseCase?: string;
  /** System prompt: at most 100,000 characters. */
  prompt?: string;
  isPublic?: boolean;
  /** Deep-merged over the stored config. */
  config?: AgentConfigInput;
  /** Replaces the whole list. */
  tools?: AgentToolBinding[];
  integrationBindings?: IntegrationBinding[];
}

/** Managed agents (`/managed-agents/agents`). */
export class Agents {
  /** Schedules of an agent: an autonomous run at every tick of a cron expression. */
  readonly schedules: Schedules;

  constructor(private readonly client: AiSuite) {
    this.schedules = new Schedules(client);
  }

  /** Await for `{ agents }`, or `for await (const agent of client.agents.list())`. */
  /** The platform defaults every agent config is deep-merged over (an extension). */
  configDefaults(opts: Opts = {}): APIPromise<{ config: Record<string, unknown> }> {
    return this.client.request({ method: 'GET', path: '/managed-agents/config-defaults', ...opts });
  }

  list(opts: Opts = {}): PagePromise<{ agents: AgentListItem[] }, AgentListItem> {
    return new PagePromise(
      () => this.client.request({ method: 'GET', path: '/managed-agents/agents', ...opts }),
      {},
      singlePage((b) => b.agents),
    );
  }

  create(body: CreateAgentParams, opts: Opts = {}): APIPromise<{ agent: AgentCreated }> {
    return this.client.request({ method: 'POST', path: '/managed-agents/agents', body, ...opts });
  }

  /** `NotFoundError` (`Agent not found`) when it does not exist in the workspace. */
  retrieve(agentId: string, opts: Opts = {}): APIPromise<{ agent: AgentDetail }> {
    return this.client.request({ method: 'GET', path: `/managed-agents/agents/${enc(agentId)}`, ...opts });
  }

  /** Only the fields sent change; `config` is deep-merged; `tools` replaces the list. */
  update(agentId: string, body: UpdateAgentParams, opts: Opts = {}): APIPromise<{ agent: AgentDetail }> {
    return this.client.request({
      method: 'PATCH',
      path: `/managed-agents/agents/${enc(agentId)}`,
      body,
      ...opts,
    });
  }

  delete(agentId: string, opts: Opts = {}): APIPromise<{ deleted: true }> {
    return this.client.request({ method: 'DELETE', path: `/managed-agents/agents/${enc(agentId)}`, ...opts });
  }

  /**
   * Tool calls of the agent's runs waiting for a person's decision, oldest first (`limit` 1 to
   * 200, default 50); decide them with `sessions.approveToolCall` / `denyToolCall`.
   */
  pendingApprovals(
    agentId: string,
    query: { limit?: number } = {},
    opts: Opts = {},
  ): APIPromise<{ approvals: ToolApproval[] }> {
    return this.client.request({
      method: 'GET',
      path: `/managed-agents/agents/${enc(agentId)}/tool-approvals`,
      query,
      ...opts,
    });
  }
}

export const enc = encodeURIComponent;
