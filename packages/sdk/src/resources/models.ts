import type { AiSuite } from '../client.js';
import { PagePromise, singlePage } from '../core/pagination.js';
import type { Model, ModelList } from './types.js';

/** The models a caller may pass as `model` (`GET /models`), with kind, context window and prices. */
export class Models {
  constructor(private readonly client: AiSuite) {}

  list(
    query: { kind?: Model['kind'] } = {},
    opts: { signal?: AbortSignal } = {},
  ): PagePromise<ModelList, Model> {
    return new PagePromise(
      () => this.client.request({ method: 'GET', path: '/models', query, ...opts }),
      {},
      singlePage((b) => b.models),
    );
  }
}
