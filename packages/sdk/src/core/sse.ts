import { createParser, type EventSourceMessage } from 'eventsource-parser';

export interface ServerSentEvent {
  /** `event:` field; `message` when absent. */
  event: string;
  data: string;
  id: string | undefined;
}

/**
 * Reads a `text/event-stream` body as events. Comments (heartbeats) are skipped.
 * Cancelling the iteration cancels the body, which aborts the request.
 */
export async function* readServerSentEvents(
  body: ReadableStream<Uint8Array>,
): AsyncGenerator<ServerSentEvent, void, undefined> {
  const queue: ServerSentEvent[] = [];
  const parser = createParser({
    onEvent(msg: EventSourceMessage) {
      queue.push({ event: msg.event ?? 'message', data: msg.data, id: msg.id });
    },
  });
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let done = false;
  try {
    while (!done) {
      const chunk = await reader.read();
      done = chunk.done;
      if (chunk.value) parser.feed(decoder.decode(chunk.value, { stream: true }));
      while (queue.length > 0) yield queue.shift() as ServerSentEvent;
    }
  } finally {
    if (!done) await reader.cancel().catch(() => {});
    reader.releaseLock();
  }
}

/** Reads a streamed body as decoded text chunks (the `/chat` stream). */
export async function* readTextChunks(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let done = false;
  try {
    while (!done) {
      const chunk = await reader.read();
      done = chunk.done;
      const text = chunk.value ? decoder.decode(chunk.value, { stream: true }) : decoder.decode();
      if (text) yield text;
    }
  } finally {
    if (!done) await reader.cancel().catch(() => {});
    reader.releaseLock();
  }
}
