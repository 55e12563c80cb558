import { APIPromise } from './api-promise.js';

/** How one list endpoint pages: where its items are, and the query of the page after a body. */
export interface Paginator<TBody, TItem, TQuery> {
  items(body: TBody): TItem[];
  /** The query of the next page, or null when `body` is the last one. */
  next(body: TBody, query: TQuery): TQuery | null;
}

/**
 * What every list method returns. Await it for the first page exactly as the server sent it
 * (`{ agents }`, `{ data, meta }`, …); iterate it with `for await` for every item of every
 * page, fetched one page at a time as the loop goes; or walk whole pages with `pages()`.
 */
export class PagePromise<TBody, TItem, TQuery = Record<string, never>>
  extends APIPromise<TBody>
  implements AsyncIterable<TItem>
{
  private readonly fetchPage: (query: TQuery) => APIPromise<TBody>;
  private readonly query: TQuery;
  private readonly paginator: Paginator<TBody, TItem, TQuery>;

  constructor(
    fetchPage: (query: TQuery) => APIPromise<TBody>,
    query: TQuery,
    paginator: Paginator<TBody, TItem, TQuery>,
  ) {
    super(fetchPage(query).withResponse());
    this.fetchPage = fetchPage;
    this.query = query;
    this.paginator = paginator;
  }

  /** Every page, the first one included, each requested when the previous one is consumed. */
  async *pages(): AsyncGenerator<TBody> {
    let body: TBody = await this;
    let query: TQuery | null = this.query;
    for (;;) {
      yield body;
      query = this.paginator.next(body, query);
      if (query === null) return;
      body = await this.fetchPage(query);
    }
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<TItem> {
    for await (const page of this.pages()) yield* this.paginator.items(page);
  }
}

/** A list the server answers in one page (`{agents}`, catalogs, models). */
export const singlePage = <TBody, TItem>(items: (body: TBody) => TItem[]): Paginator<TBody, TItem, any> => ({
  items,
  next: () => null,
});

type OffsetQuery = { limit?: number; offset?: number };

/**
 * `limit`/`offset` paging with a total: `{ <items>, total }` (sessions, runs) or
 * `{ data, meta: { limit, offset, total } }` (apps, threads, messages, insights, widget tokens).
 */
export function offsetPages<TBody, TItem, TQuery extends OffsetQuery>(
  items: (body: TBody) => TItem[],
  total: (body: TBody) => number,
): Paginator<TBody, TItem, TQuery> {
  return {
    items,
    next(body, query) {
      const got = items(body).length;
      const offset = (query.offset ?? 0) + got;
      return got > 0 && offset < total(body) ? { ...query, offset } : null;
    },
  };
}

/** `{ data, meta: { total } }` lists. */
export const dataMetaPages = <
  TBody extends { data: unknown[]; meta: { total: number } },
  TQuery extends OffsetQuery,
>() =>
  offsetPages<TBody, TBody['data'][number], TQuery>(
    (b) => b.data,
    (b) => b.meta.total,
  );

/** Cursor paging: the body's `nextCursor` is the `cursor` of the next request (storage). */
export function cursorPages<
  TBody extends { nextCursor?: string | null },
  TItem,
  TQuery extends { cursor?: string },
>(items: (body: TBody) => TItem[]): Paginator<TBody, TItem, TQuery> {
  return {
    items,
    next: (body, query) => (body.nextCursor ? { ...query, cursor: body.nextCursor } : null),
  };
}
