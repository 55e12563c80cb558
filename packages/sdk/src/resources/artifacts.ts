import type { AiSuite } from '../client.js';
import type { APIPromise } from '../core/api-promise.js';
import type { ArtifactGenerateParams, ArtifactGenerateResponse } from './types.js';

/**
 * Structured insight reports from aggregated customer data (spec 4.8). Credit-metered; a
 * rule broken in the body is a `BadRequestError` with code `INVALID_INPUT`.
 */
export class Artifacts {
  constructor(private readonly client: AiSuite) {}

  /**
   * One report: `data.outputSnapshot` (spec 2.13), `data.usage` (tokens, cost) and `meta`
   * (`requestId`, `persisted`, `workflowRunId`). A generation takes one model call, or two
   * when the first reply does not validate; give it a generous `timeout` on the client.
   */
  generate(
    body: ArtifactGenerateParams,
    opts: { signal?: AbortSignal } = {},
  ): APIPromise<ArtifactGenerateResponse> {
    return this.client.request({ method: 'POST', path: '/artifacts/generate', body, ...opts });
  }
}
