import type { Principal } from '../auth/principal.js';
import type { SessionRecord } from '../auth/sessions.js';

declare global {
  namespace Express {
    interface Request {
      principal?: Principal;
      /** The resolved session, when the request carries one (resolved at most once). */
      session?: SessionRecord;
      requestId?: string;
      /** Set on the web console's mount of the API (`/console-api/v1`): sessions only. */
      consoleApi?: boolean;
    }
  }
}
