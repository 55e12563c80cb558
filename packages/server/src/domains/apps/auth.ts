import { authenticateAppCaller } from '../../auth/widget-tokens.js';
import { authenticateApiKey, publicProcedure } from '../../trpc.js';

/**
 * The procedure of the spec's Apps endpoints (chat, memory): a workspace API key or a widget
 * token (spec 5). Everything else uses `keyProcedure`, which refuses widget tokens.
 */
export const appProcedure = publicProcedure.use(async ({ ctx, next }) => {
  const principal = await authenticateAppCaller(ctx.req, ctx.em, authenticateApiKey);
  return next({ ctx: { ...ctx, principal } });
});
