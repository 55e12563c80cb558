import type { AiSuite } from '../client.js';
import type { APIPromise } from '../core/api-promise.js';
import type { IntegrationPack, PackSkill, PackTool, PlatformTool } from './types.js';

/** The public catalogs (no credentials sent). */
export class Catalogs {
  constructor(private readonly client: AiSuite) {}

  /** Active integration packs, ordered by name. */
  listPacks(opts: { signal?: AbortSignal } = {}): APIPromise<{ packs: IntegrationPack[] }> {
    return this.client.request({ method: 'GET', path: '/integration-packs', noAuth: true, ...opts });
  }

  /** A pack with its tools and skills; `NotFoundError` (`Pack not found`) otherwise. */
  getPack(
    packId: string,
    opts: { signal?: AbortSignal } = {},
  ): APIPromise<{ pack: IntegrationPack; tools: PackTool[]; skills: PackSkill[] }> {
    return this.client.request({
      method: 'GET',
      path: `/integration-packs/${encodeURIComponent(packId)}`,
      noAuth: true,
      ...opts,
    });
  }

  /** Platform tools, optionally filtered by agent kind and runtime mode. */
  listPlatformTools(
    filter: { agentKind?: string; runtimeMode?: 'assist' | 'autonomous' } = {},
    opts: { signal?: AbortSignal } = {},
  ): APIPromise<{ tools: PlatformTool[] }> {
    return this.client.request({
      method: 'GET',
      path: '/platform-tools',
      query: filter,
      noAuth: true,
      ...opts,
    });
  }
}
