/**
 * The browser side of the widget: gets a widget token from the integrator's own backend
 * (`/widget-config`, never an API key), then chats with the app through the SDK, streaming
 * the reply into the page and continuing the same thread.
 */
import { AiSuite, AppChatStreamError } from '@ai-suite/sdk';

interface WidgetConfig {
  token: string;
  appId: string;
  baseURL: string;
}

const $ = <T extends HTMLElement>(sel: string) => document.querySelector(sel) as T;
const widget = $<HTMLDivElement>('#widget');
const log = $<HTMLDivElement>('#log');
const status = $<HTMLDivElement>('#status');
const form = $<HTMLFormElement>('#chat-form');
const input = $<HTMLInputElement>('#message');
const send = $<HTMLButtonElement>('#send');

function bubble(role: 'user' | 'assistant', text = ''): HTMLDivElement {
  const el = document.createElement('div');
  el.className = `msg ${role}`;
  el.textContent = text;
  log.append(el);
  log.scrollTop = log.scrollHeight;
  return el;
}

function visitorId(): string {
  const key = 'ai-suite-visitor';
  let id = localStorage.getItem(key);
  if (!id) {
    id = crypto.randomUUID();
    localStorage.setItem(key, id);
  }
  return id;
}

async function main() {
  const cfg = (await (await fetch('/widget-config')).json()) as WidgetConfig;
  const client = new AiSuite({ widgetToken: cfg.token, baseURL: cfg.baseURL, maxRetries: 0 });
  let threadId: string | undefined;
  widget.dataset.state = 'ready';
  status.textContent = 'Ready';
  send.disabled = false;

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const message = input.value.trim();
    if (!message) return;
    input.value = '';
    send.disabled = true;
    widget.dataset.state = 'streaming';
    bubble('user', message);
    const reply = bubble('assistant');
    try {
      const stream = await client.apps.chatStream(cfg.appId, {
        message,
        role: 'visitor',
        ...(threadId ? { threadId } : {}),
        externalIdentity: { anonymousVisitorId: visitorId() },
      });
      for await (const token of stream) {
        reply.textContent += token;
        log.scrollTop = log.scrollHeight;
      }
      const done = await stream.done;
      threadId = done.threadId;
      widget.dataset.threadId = done.threadId;
      status.textContent = `${done.metadata.tokensUsed.total} tokens · ${done.metadata.latencyMs} ms`;
      widget.dataset.state = 'ready';
    } catch (err) {
      reply.classList.add('error');
      reply.textContent =
        err instanceof AppChatStreamError ? `Error (${err.code}): ${err.message}` : String(err);
      widget.dataset.state = 'error';
    } finally {
      send.disabled = false;
    }
  });
}

main().catch((err) => {
  widget.dataset.state = 'error';
  status.textContent = `Could not start: ${String(err)}`;
});
