import type { components } from '../generated/openapi.js';

type Schemas = components['schemas'];

export type Me = Schemas['Me'];
export type IntegrationPack = Schemas['IntegrationPack'];
export type PackTool = Schemas['PackTool'];
export type PackSkill = Schemas['PackSkill'];
export type PlatformTool = Schemas['PlatformTool'];
export type ErrorBody = Schemas['ErrorBody'];
export type AgentListItem = Schemas['AgentListItem'];
export type AgentCreated = Schemas['AgentCreated'];
export type AgentDetail = Schemas['AgentDetail'];
export type AgentConfigInput = Schemas['AgentConfigInput'];
export type AgentToolBinding = Schemas['AgentToolBinding'];
export type IntegrationBinding = Schemas['IntegrationBinding'];
export type AgentSession = Schemas['AgentSession'];
export type SessionTimeline = Schemas['SessionTimeline'];
export type ToolResultAccepted = Schemas['ToolResultAccepted'];
export type ChatMessage = Schemas['ChatMessage'];
export type ChatRequest = Schemas['ChatRequest'];
