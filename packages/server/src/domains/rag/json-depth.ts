/**
 * Whether `text` (a JSON document, or its first bytes) nests arrays and objects deeper than
 * `max`. One pass, strings skipped, stopping at the first level too deep: cheap enough to run
 * before `JSON.parse`, whose result the flattening walks one call per level.
 */
export function jsonDepthOver(text: string, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return true;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return false;
}
