import { API_KEY_OR_WIDGET } from '../../auth/authenticate.js';
import { procedureFor } from '../../trpc.js';

/**
 * The procedure of the spec's Apps endpoints (chat, memory): a workspace API key or a widget
 * token (spec 5). Everything else uses `keyProcedure`, which refuses widget tokens.
 */
export const appProcedure = procedureFor(API_KEY_OR_WIDGET);
