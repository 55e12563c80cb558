import type { ChatPassthrough, LlmMessage, ToolCall } from '../../providers/llm.js';
import { invalidRequest, unsupported } from './errors.js';

/** The prefix of a model id that names an agent of the workspace (`agent/<agentId>`). */
export const AGENT_MODEL_PREFIX = 'agent/';

/** Most tools one request may declare (OpenAI's own limit). */
export const MAX_TOOLS = 128;
/** Most messages one request may carry. */
export const MAX_MESSAGES = 2048;

/** A `POST /openai/chat/completions` body, checked. */
export interface CompletionRequest {
  /** The `model` as given. */
  model: string;
  /** Set when `model` is `agent/<agentId>`. */
  agentId?: string;
  messages: LlmMessage[];
  stream: boolean;
  /** `stream_options.include_usage`. */
  includeUsage: boolean;
  user?: string;
  temperature?: number;
  maxTokens?: number;
  /** Options sent upstream under their OpenAI names (tools included). */
  passthrough: ChatPassthrough;
  /** Names of the parameters given besides `model`, `messages`, `stream`, `stream_options`, `user`, `n`. */
  options: string[];
}

type Obj = Record<string, unknown>;

const isObj = (v: unknown): v is Obj => v !== null && typeof v === 'object' && !Array.isArray(v);
const present = (v: unknown) => v !== undefined && v !== null;

/** Every top-level parameter this surface reads; anything else is refused by name. */
const KNOWN = new Set([
  'model',
  'messages',
  'stream',
  'stream_options',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'response_format',
  'max_tokens',
  'max_completion_tokens',
  'temperature',
  'top_p',
  'stop',
  'seed',
  'user',
  'n',
  'frequency_penalty',
  'presence_penalty',
  // Known to OpenAI, refused here unless harmless (below).
  'logprobs',
  'top_logprobs',
  'logit_bias',
  'audio',
  'modalities',
  'prediction',
  'web_search_options',
  'functions',
  'function_call',
  'service_tier',
  'store',
  'metadata',
  'reasoning_effort',
  'verbosity',
]);

function num(b: Obj, key: string, min: number, max: number, int = false): number | undefined {
  const v = b[key];
  if (!present(v)) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max || (int && !Number.isInteger(v))) {
    throw invalidRequest(
      `Invalid value for '${key}': expected ${int ? 'an integer' : 'a number'} from ${min} to ${max}.`,
      key,
      'invalid_value',
    );
  }
  return v;
}

function bool(b: Obj, key: string): boolean | undefined {
  const v = b[key];
  if (!present(v)) return undefined;
  if (typeof v !== 'boolean')
    throw invalidRequest(`Invalid type for '${key}': expected a boolean.`, key, 'invalid_type');
  return v;
}

/** A message's text: a string, or an array of `text` parts (joined); other parts are refused. */
function textOf(content: unknown, param: string, allowNull: boolean): string | null {
  if (content === null || content === undefined) {
    if (allowNull) return null;
    throw invalidRequest(`Missing required parameter: '${param}'.`, param, 'missing_required_parameter');
  }
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    let text = '';
    content.forEach((part, j) => {
      if (!isObj(part) || typeof part.type !== 'string') {
        throw invalidRequest(`Invalid content part at '${param}[${j}]'.`, `${param}[${j}]`, 'invalid_type');
      }
      if (part.type === 'text' && typeof part.text === 'string') text += part.text;
      else if (part.type === 'refusal' && typeof part.refusal === 'string') text += part.refusal;
      else
        throw unsupported(
          `${param}[${j}]`,
          `(content of type \`${part.type}\`) is not supported: only text parts are`,
        );
    });
    return text;
  }
  throw invalidRequest(
    `Invalid type for '${param}': expected a string or an array of text parts.`,
    param,
    'invalid_type',
  );
}

function parseToolCalls(v: unknown, param: string): ToolCall[] | undefined {
  if (!present(v)) return undefined;
  if (!Array.isArray(v))
    throw invalidRequest(`Invalid type for '${param}': expected an array.`, param, 'invalid_type');
  return v.map((tc, j) => {
    const p = `${param}[${j}]`;
    const fn = isObj(tc) ? tc.function : undefined;
    if (
      !isObj(tc) ||
      typeof tc.id !== 'string' ||
      (tc.type !== undefined && tc.type !== 'function') ||
      !isObj(fn) ||
      typeof fn.name !== 'string' ||
      typeof fn.arguments !== 'string'
    ) {
      throw invalidRequest(
        `Invalid tool call at '${p}': expected {id, type: "function", function: {name, arguments}}.`,
        p,
        'invalid_type',
      );
    }
    return { id: tc.id, name: fn.name, arguments: fn.arguments };
  });
}

export function parseMessages(v: unknown): LlmMessage[] {
  if (!present(v))
    throw invalidRequest("Missing required parameter: 'messages'.", 'messages', 'missing_required_parameter');
  if (!Array.isArray(v))
    throw invalidRequest("Invalid type for 'messages': expected an array.", 'messages', 'invalid_type');
  if (v.length === 0)
    throw invalidRequest(
      "Invalid 'messages': empty array. Expected at least one message.",
      'messages',
      'empty_array',
    );
  if (v.length > MAX_MESSAGES) {
    throw invalidRequest(
      `Invalid 'messages': at most ${MAX_MESSAGES} messages.`,
      'messages',
      'array_above_max_length',
    );
  }
  return v.map((m, i): LlmMessage => {
    const p = `messages[${i}]`;
    if (!isObj(m)) throw invalidRequest(`Invalid type for '${p}': expected an object.`, p, 'invalid_type');
    switch (m.role) {
      case 'system':
      case 'developer':
        return { role: 'system', content: textOf(m.content, `${p}.content`, false) as string };
      case 'user':
        return { role: 'user', content: textOf(m.content, `${p}.content`, false) as string };
      case 'assistant': {
        const toolCalls = parseToolCalls(m.tool_calls, `${p}.tool_calls`);
        const content = textOf(m.content, `${p}.content`, true);
        if (content === null && !toolCalls?.length) {
          throw invalidRequest(
            `Missing required parameter: '${p}.content'.`,
            `${p}.content`,
            'missing_required_parameter',
          );
        }
        return toolCalls?.length ? { role: 'assistant', content, toolCalls } : { role: 'assistant', content };
      }
      case 'tool': {
        if (typeof m.tool_call_id !== 'string' || m.tool_call_id === '') {
          throw invalidRequest(
            `Missing required parameter: '${p}.tool_call_id'.`,
            `${p}.tool_call_id`,
            'missing_required_parameter',
          );
        }
        return {
          role: 'tool',
          toolCallId: m.tool_call_id,
          content: textOf(m.content, `${p}.content`, false) as string,
        };
      }
      case 'function':
        throw unsupported(
          `${p}.role`,
          '(`function` messages, deprecated by OpenAI) is not supported: use `tool`',
        );
      default:
        throw invalidRequest(
          `Invalid value for '${p}.role': expected one of system, developer, user, assistant, tool.`,
          `${p}.role`,
          'invalid_value',
        );
    }
  });
}

function parseTools(v: unknown): ChatPassthrough['tools'] {
  if (!present(v)) return undefined;
  if (!Array.isArray(v))
    throw invalidRequest("Invalid type for 'tools': expected an array.", 'tools', 'invalid_type');
  if (v.length > MAX_TOOLS)
    throw invalidRequest(`Invalid 'tools': at most ${MAX_TOOLS} tools.`, 'tools', 'array_above_max_length');
  return v.map((t, i) => {
    const p = `tools[${i}]`;
    const fn = isObj(t) ? t.function : undefined;
    if (!isObj(t) || t.type !== 'function' || !isObj(fn)) {
      throw invalidRequest(
        `Invalid tool at '${p}': expected {type: "function", function: {name, …}}.`,
        p,
        'invalid_type',
      );
    }
    if (typeof fn.name !== 'string' || !/^[a-zA-Z0-9_-]{1,64}$/.test(fn.name)) {
      throw invalidRequest(
        `Invalid '${p}.function.name': 1 to 64 letters, digits, underscores or dashes.`,
        `${p}.function.name`,
        'invalid_value',
      );
    }
    if (present(fn.description) && typeof fn.description !== 'string') {
      throw invalidRequest(
        `Invalid type for '${p}.function.description'.`,
        `${p}.function.description`,
        'invalid_type',
      );
    }
    if (present(fn.parameters) && !isObj(fn.parameters)) {
      throw invalidRequest(
        `Invalid type for '${p}.function.parameters': expected a JSON Schema object.`,
        `${p}.function.parameters`,
        'invalid_type',
      );
    }
    if (present(fn.strict) && typeof fn.strict !== 'boolean') {
      throw invalidRequest(
        `Invalid type for '${p}.function.strict'.`,
        `${p}.function.strict`,
        'invalid_type',
      );
    }
    return {
      type: 'function' as const,
      function: {
        name: fn.name,
        ...(typeof fn.description === 'string' ? { description: fn.description } : {}),
        ...(isObj(fn.parameters) ? { parameters: fn.parameters } : {}),
        ...(typeof fn.strict === 'boolean' ? { strict: fn.strict } : {}),
      },
    };
  });
}

function parseToolChoice(v: unknown, tools: ChatPassthrough['tools']): ChatPassthrough['tool_choice'] {
  if (!present(v)) return undefined;
  if (v === 'none' || v === 'auto' || v === 'required') return v;
  if (isObj(v) && v.type === 'function' && isObj(v.function) && typeof v.function.name === 'string') {
    const name = v.function.name;
    if (!tools?.some((t) => t.function.name === name)) {
      throw invalidRequest(
        `Invalid 'tool_choice': no tool named '${name}' in 'tools'.`,
        'tool_choice',
        'invalid_value',
      );
    }
    return { type: 'function', function: { name } };
  }
  throw invalidRequest(
    'Invalid value for \'tool_choice\': expected none, auto, required or {type: "function", function: {name}}.',
    'tool_choice',
    'invalid_value',
  );
}

function parseResponseFormat(v: unknown): ChatPassthrough['response_format'] {
  if (!present(v)) return undefined;
  if (!isObj(v))
    throw invalidRequest(
      "Invalid type for 'response_format': expected an object.",
      'response_format',
      'invalid_type',
    );
  if (v.type === 'text') return { type: 'text' };
  if (v.type === 'json_object') return { type: 'json_object' };
  if (v.type === 'json_schema') {
    const js = v.json_schema;
    if (!isObj(js) || typeof js.name !== 'string' || !/^[a-zA-Z0-9_-]{1,64}$/.test(js.name)) {
      throw invalidRequest(
        "Invalid 'response_format.json_schema': expected {name, schema?, strict?, description?} with a name of 1 to 64 letters, digits, underscores or dashes.",
        'response_format.json_schema',
        'invalid_value',
      );
    }
    if (present(js.schema) && !isObj(js.schema)) {
      throw invalidRequest(
        "Invalid type for 'response_format.json_schema.schema'.",
        'response_format.json_schema.schema',
        'invalid_type',
      );
    }
    if (present(js.strict) && typeof js.strict !== 'boolean') {
      throw invalidRequest(
        "Invalid type for 'response_format.json_schema.strict'.",
        'response_format.json_schema.strict',
        'invalid_type',
      );
    }
    return {
      type: 'json_schema',
      json_schema: {
        name: js.name,
        ...(typeof js.description === 'string' ? { description: js.description } : {}),
        ...(isObj(js.schema) ? { schema: js.schema } : {}),
        ...(typeof js.strict === 'boolean' ? { strict: js.strict } : {}),
      },
    };
  }
  throw invalidRequest(
    "Invalid value for 'response_format.type': expected text, json_object or json_schema.",
    'response_format.type',
    'invalid_value',
  );
}

/** The parameters OpenAI knows that this service refuses when they ask for something. */
function refuseUnsupported(b: Obj): void {
  if (present(b.n) && b.n !== 1) {
    if (typeof b.n !== 'number' || !Number.isInteger(b.n) || b.n < 1) {
      throw invalidRequest("Invalid value for 'n': expected a positive integer.", 'n', 'invalid_value');
    }
    throw unsupported('n', 'above 1 is not supported: one choice per request');
  }
  if (b.logprobs === true) throw unsupported('logprobs');
  if (present(b.logprobs) && typeof b.logprobs !== 'boolean') {
    throw invalidRequest("Invalid type for 'logprobs': expected a boolean.", 'logprobs', 'invalid_type');
  }
  if (present(b.top_logprobs)) throw unsupported('top_logprobs');
  if (present(b.logit_bias) && !(isObj(b.logit_bias) && Object.keys(b.logit_bias).length === 0)) {
    throw unsupported('logit_bias');
  }
  if (present(b.modalities)) {
    const m = b.modalities;
    if (!(Array.isArray(m) && m.length === 1 && m[0] === 'text'))
      throw unsupported('modalities', 'other than ["text"] is not supported');
  }
  if (present(b.service_tier) && b.service_tier !== 'auto' && b.service_tier !== 'default')
    throw unsupported('service_tier');
  if (b.store === true) throw unsupported('store', '(stored completions) is not supported');
  for (const k of [
    'audio',
    'prediction',
    'web_search_options',
    'functions',
    'function_call',
    'metadata',
    'reasoning_effort',
    'verbosity',
  ]) {
    if (present(b[k])) throw unsupported(k);
  }
}

/**
 * Reads a chat-completions body: OpenAI's field names, types and bounds, each failure a 400
 * naming its `param`. Parameters this service cannot honour are refused by name, never dropped.
 */
export function parseCompletionRequest(body: unknown): CompletionRequest {
  if (!isObj(body)) throw invalidRequest('The request body must be a JSON object.', null, 'invalid_type');
  for (const k of Object.keys(body)) {
    if (!KNOWN.has(k))
      throw invalidRequest(`Unrecognized request argument supplied: ${k}`, k, 'unknown_parameter');
  }
  const model = body.model;
  if (!present(model))
    throw invalidRequest('You must provide a model parameter.', 'model', 'missing_required_parameter');
  if (typeof model !== 'string' || model === '')
    throw invalidRequest("Invalid type for 'model': expected a string.", 'model', 'invalid_type');
  refuseUnsupported(body);
  const messages = parseMessages(body.messages);
  const stream = bool(body, 'stream') ?? false;
  let includeUsage = false;
  if (present(body.stream_options)) {
    const so = body.stream_options;
    if (!stream)
      throw invalidRequest(
        "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
        'stream_options',
        'invalid_value',
      );
    if (!isObj(so))
      throw invalidRequest(
        "Invalid type for 'stream_options': expected an object.",
        'stream_options',
        'invalid_type',
      );
    for (const k of Object.keys(so)) {
      if (k !== 'include_usage') throw unsupported(`stream_options.${k}`);
    }
    includeUsage = bool(so, 'include_usage') ?? false;
  }
  if (present(body.user) && typeof body.user !== 'string') {
    throw invalidRequest("Invalid type for 'user': expected a string.", 'user', 'invalid_type');
  }
  const user = typeof body.user === 'string' && body.user !== '' ? body.user : undefined;
  if (user && user.length > 256)
    throw invalidRequest("Invalid 'user': at most 256 characters.", 'user', 'string_above_max_length');

  const passthrough: ChatPassthrough = {};
  const tools = parseTools(body.tools);
  if (tools) passthrough.tools = tools;
  const toolChoice = parseToolChoice(body.tool_choice, tools);
  if (toolChoice) passthrough.tool_choice = toolChoice;
  const parallel = bool(body, 'parallel_tool_calls');
  if (parallel !== undefined) {
    if (!tools)
      throw invalidRequest(
        "'parallel_tool_calls' is only allowed when 'tools' are specified.",
        'parallel_tool_calls',
        'invalid_value',
      );
    passthrough.parallel_tool_calls = parallel;
  }
  const rf = parseResponseFormat(body.response_format);
  if (rf) passthrough.response_format = rf;
  const maxTokens = num(body, 'max_tokens', 1, 10_000_000, true);
  const maxCompletion = num(body, 'max_completion_tokens', 1, 10_000_000, true);
  if (maxCompletion !== undefined) passthrough.max_completion_tokens = maxCompletion;
  const temperature = num(body, 'temperature', 0, 2);
  const topP = num(body, 'top_p', 0, 1);
  if (topP !== undefined) passthrough.top_p = topP;
  const seed = num(body, 'seed', Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER, true);
  if (seed !== undefined) passthrough.seed = seed;
  const fp = num(body, 'frequency_penalty', -2, 2);
  if (fp !== undefined) passthrough.frequency_penalty = fp;
  const pp = num(body, 'presence_penalty', -2, 2);
  if (pp !== undefined) passthrough.presence_penalty = pp;
  if (present(body.stop)) {
    const s = body.stop;
    const ok =
      typeof s === 'string' ||
      (Array.isArray(s) &&
        s.length >= 1 &&
        s.length <= 4 &&
        s.every((x) => typeof x === 'string' && x !== ''));
    if (!ok)
      throw invalidRequest(
        "Invalid value for 'stop': expected a string or an array of 1 to 4 strings.",
        'stop',
        'invalid_value',
      );
    passthrough.stop = s as string | string[];
  }
  if (user) passthrough.user = user;

  const options = Object.keys(body).filter(
    (k) =>
      present(body[k]) &&
      ![
        'model',
        'messages',
        'stream',
        'stream_options',
        'user',
        'n',
        'logprobs',
        'store',
        'service_tier',
        'modalities',
        'logit_bias',
      ].includes(k),
  );
  const agentId = model.startsWith(AGENT_MODEL_PREFIX) ? model.slice(AGENT_MODEL_PREFIX.length) : undefined;
  return {
    model,
    ...(agentId !== undefined ? { agentId } : {}),
    messages,
    stream,
    includeUsage,
    ...(user ? { user } : {}),
    ...(temperature !== undefined ? { temperature } : {}),
    ...(maxTokens !== undefined ? { maxTokens } : {}),
    passthrough,
    options,
  };
}
