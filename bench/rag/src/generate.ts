/**
 * The bench's made-up text, shared by `main.ts` and `ingest-statements.ts`: words of two to
 * four syllables and the rows of its price-list CSV, drawn from a seeded PRNG (testkit's
 * `prng`), so every run and machine gets the same data.
 */
export { prng } from '@ai-suite/testkit';

const SYLLABLES = 'ka lo mi ne ru sa ta vo de fi gu ha jo ke li mo na pe ri so tu ve wa ze bo'.split(' ');
export const PRODUCTS = [
  'tent',
  'stove',
  'lantern',
  'backpack',
  'sleeping bag',
  'jacket',
  'boots',
  'map case',
];
export const REGIONS = ['north', 'south', 'east', 'west', 'alpine', 'coastal'];
export const CSV_HEADER = 'id,sku,region,product,description\n';

const pickWith = <T>(rand: () => number, xs: readonly T[]) => xs[Math.floor(rand() * xs.length)] as T;

/** A made-up word of two to four syllables. */
export function word(rand: () => number): string {
  const n = 2 + Math.floor(rand() * 3);
  let w = '';
  for (let i = 0; i < n; i++) w += pickWith(rand, SYLLABLES);
  return w;
}

/** Row `id` of the CSV (with its newline): a description of 14 words of `common`. */
export function csvRow(id: number, rand: () => number, common: readonly string[]): string {
  const desc = Array.from({ length: 14 }, () => pickWith(rand, common)).join(' ');
  return `${id},SKU-${(id * 7919) % 100000},${pickWith(rand, REGIONS)},${pickWith(rand, PRODUCTS)},"${desc}, rated for ${id % 40} degrees"\n`;
}
