import { appError } from '../../errors/index.js';
import packsFile from './data/integration-packs.json' with { type: 'json' };
import toolsFile from './data/platform-tools.json' with { type: 'json' };
import {
  PackFileSchema,
  type PackRecord,
  PlatformToolFileSchema,
  type PlatformToolRecord,
} from './schema.js';

/**
 * The public catalogs (spec 4.13), served from versioned data in the repo. Parsed once at
 * start, so a bad edit to the data fails the build and the tests, not a request.
 */
export class CatalogService {
  private readonly packs: PackRecord[];
  private readonly tools: PlatformToolRecord[];

  constructor(packs: unknown = packsFile, tools: unknown = toolsFile) {
    this.packs = PackFileSchema.parse(packs).packs;
    this.tools = PlatformToolFileSchema.parse(tools).tools;
  }

  /** Active packs, ordered by name ascending. */
  listPacks() {
    return this.packs
      .filter((p) => p.active)
      .sort((a, b) => a.name.localeCompare(b.name, 'en'))
      .map(({ active: _a, tools: _t, skills: _s, ...pack }) => pack);
  }

  /** An active pack with its tools and skills; inactive packs are not found. */
  getPack(packId: string) {
    const found = this.packs.find((p) => p.id === packId && p.active);
    if (!found) throw appError('PACK_NOT_FOUND');
    const { active: _a, tools, skills, ...pack } = found;
    return { pack, tools, skills };
  }

  findPack(packId: string): PackRecord | undefined {
    return this.packs.find((p) => p.id === packId && p.active);
  }

  listPlatformTools(filter: { agentKind?: string; runtimeMode?: string } = {}) {
    return this.tools
      .filter((t) => !filter.agentKind || t.agentKinds.includes(filter.agentKind))
      .filter((t) => !filter.runtimeMode || t.runtimeModes.includes(filter.runtimeMode))
      .map(({ inputSchema: _i, ...tool }) => tool);
  }

  /** Full tool definitions (with input schemas), for the agent runtime. */
  platformToolDefinitions(): PlatformToolRecord[] {
    return this.tools;
  }
}

export const catalogService = new CatalogService();
