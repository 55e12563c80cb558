import { appsEntities } from './domains/apps/entities.js';
import { storageEntities } from './domains/storage/entities.js';
import { widgetTokenEntities } from './domains/widget-tokens/entities.js';
import { foundationEntities } from './domains/workspaces/entities.js';
import { meteringEntities } from './metering/entities.js';

/** Every entity the ORM maps, handed to `openDatabase` by the composition root. Domains append theirs here. */
export const allEntities = [
  ...foundationEntities,
  ...meteringEntities,
  ...storageEntities,
  ...appsEntities,
  ...widgetTokenEntities,
];
