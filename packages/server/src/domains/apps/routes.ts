import type { RawRouteModule } from '../../http/raw-routes.js';
import { appsCors } from './cors.js';

/** CORS for /apps/* (and, once wired, the chat stream). */
export const appsRawRoutes: RawRouteModule = {
  name: 'apps',
  mount(router) {
    router.use('/apps', appsCors);
  },
  openapi: {},
};
