import type { AiSuite } from '../client.js';
import type { APIPromise } from '../core/api-promise.js';
import { PagePromise, singlePage } from '../core/pagination.js';
import type { IntegrationPack, PackSkill, PackTool, PlatformTool } from './types.js';

/** The public catalogs (no credentials sent). */
export class Catalogs {
  constructor(private readonly client: AiSuite) {}

  /** Active integration packs, ordered by name. */
  listPacks(opts: { signal?: AbortSignal } = {}): PagePromise<{ packs: IntegrationPack[] }, IntegrationPack> {
    return new PagePromise(
      () => this.client.request({ method: 'GET', path: '/integration-packs', noAuth: true, ...opts }),
      {},
      singlePage((b) => b.packs),
    );
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
  ): PagePromise<{ tools: PlatformTool[] }, PlatformTool> {
    return new PagePromise(
      () =>
        this.client.request({
          method: 'GET',
          path: '/platform-tools',
          query: filter,
          noAuth: true,
          ...opts,
        }),
      {},
      singlePage((b) => b.tools),
    );
  }
}
