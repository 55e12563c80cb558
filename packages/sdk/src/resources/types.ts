import type { components } from '../generated/openapi.js';

type Schemas = components['schemas'];

export type Me = Schemas['Me'];
export type IntegrationPack = Schemas['IntegrationPack'];
export type PackTool = Schemas['PackTool'];
export type PackSkill = Schemas['PackSkill'];
export type PlatformTool = Schemas['PlatformTool'];
export type ErrorBody = Schemas['ErrorBody'];
export type ChatMessage = Schemas['ChatMessage'];
export type ChatRequest = Schemas['ChatRequest'];
